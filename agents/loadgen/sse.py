"""Incremental Server-Sent Events parser: bytes in, complete ``data`` payloads out.

Guarantees (WHATWG "event stream interpretation", the subset OpenAI-compatible servers use):

- Input may be split anywhere, including between the ``\\r`` and ``\\n`` of a CRLF.
- Lines end with CRLF, LF or CR. A blank line ends an event; an event's ``data`` lines are
  joined with ``\\n``. One space after the colon is dropped. Comment lines (``:``) and other
  fields (``event``, ``id``, ``retry``) are ignored; an event without ``data`` is not emitted.
- A partial line or event is held until it is complete; ``pending`` says whether one is.
"""

from __future__ import annotations

_LF = b"\n"
_CR = b"\r"
_BLANK_LINE = b"\n\n"
_DATA = b"data: "
_NEXT_DATA = b"\n\ndata: "


def _block_data(block: bytes) -> bytes | None:
    """The data of one event's lines (no blank line among them), or None without data."""
    data = []
    for line in block.split(_LF):
        if line[:5] == b"data:":
            data.append(line[6:] if line[5:6] == b" " else line[5:])
        elif line == b"data":
            data.append(b"")  # a field name alone means an empty value
        # Comments (":...") and the other fields carry nothing we measure.
    return _LF.join(data) if data else None


class SseParser:
    """Feeds raw stream bytes and returns the data payloads of the events they complete."""

    __slots__ = ("_buffer", "_skip_lf")

    def __init__(self) -> None:
        # Unfinished events, line ends already normalised to LF.
        self._buffer = b""
        # A CR ended the previous feed: an LF that starts the next one belongs to it.
        self._skip_lf = False

    @property
    def pending(self) -> bool:
        """True while an incomplete line or event is buffered."""
        return bool(self._buffer)

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == _LF:
                chunk = chunk[1:]
        if _CR in chunk:
            if chunk[-1:] == _CR:
                # Maybe the first half of a CRLF: end the line now, drop a following LF.
                self._skip_lf = True
            chunk = chunk.replace(b"\r\n", _LF).replace(_CR, _LF)
        buffer = self._buffer + chunk if self._buffer else chunk
        # The common case, whole events of one "data: " line each (vLLM's), split at once:
        # as many line ends as twice the events means no other lines among them.
        if buffer[:6] == _DATA and buffer[-2:] == _BLANK_LINE:
            events = buffer[6:-2].split(_NEXT_DATA)
            if buffer.count(_LF) == 2 * len(events):
                self._buffer = b""
                return events
        blocks = buffer.split(_BLANK_LINE)
        self._buffer = blocks.pop()  # after the last blank line: an unfinished event
        events: list[bytes] = []
        for block in blocks:
            # The common case, one "data: {...}" line per event, without a per-line loop.
            if block[:6] == _DATA and _LF not in block:
                events.append(block[6:])
            elif block:
                data = _block_data(block.lstrip(_LF))
                if data is not None:
                    events.append(data)
        return events
