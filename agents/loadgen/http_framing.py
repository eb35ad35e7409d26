"""Reading one HTTP/1.1 response as its bytes arrive: the head, then the body by its framing.

Guarantees:

- Bodies framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or connection close are
  decoded; interim 1xx responses are skipped. Body bytes reach the ``ResponseSink`` with the
  arrival time they came with, untouched.
- Malformed framing raises ``HttpError("malformed_http", …)``; a connection closed before
  the response ended raises ``HttpError("stream_ended_early", …)``.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

# A response head larger than this is not an HTTP server we can benchmark.
MAX_HEAD_BYTES = 64 * 1024
# The longest chunk-size line (hex digits plus extensions) we accept.
MAX_CHUNK_LINE = 4096
_HEX_DIGITS = b"0123456789abcdefABCDEF"


class HttpError(Exception):
    """A request failed before a complete response was read. ``kind`` is a short, stable
    name for counting failures; the message is a human-readable sample."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class ResponseSink(Protocol):
    """Receives one response as it arrives. Called on the event loop; must not block."""

    def on_head(self, status: int, headers: dict[str, str]) -> None: ...

    def on_body(self, data: bytes, now: float) -> None: ...

    def on_end(self) -> None: ...


def _chunk_size_digits(line: bytes) -> bytes:
    """The hex digits of a chunk-size line with extensions or spaces; ``ValueError`` when it
    has none or anything else."""
    digits = line.split(b";", 1)[0].strip()
    if not digits or digits.strip(_HEX_DIGITS):
        raise ValueError(f"bad chunk size {line[:40]!r}")
    return digits


class ChunkedDecoder:
    """Decodes ``Transfer-Encoding: chunked`` incrementally; ``done`` after the last chunk
    and its trailers. Raises ``ValueError`` on malformed framing."""

    __slots__ = ("_buffer", "_remaining", "_state", "done")

    _SIZE, _DATA, _DATA_END, _TRAILER = range(4)

    def __init__(self) -> None:
        self._buffer = b""
        self._remaining = 0
        self._state = self._SIZE
        self.done = False

    def feed(self, data: bytes) -> bytes:
        buffer = self._buffer + data if self._buffer else data
        out: list[bytes] = []
        position, size = 0, len(buffer)
        if self._state == self._SIZE:
            position = self._whole_chunks(buffer, out)
        while position < size and not self.done:
            state = self._state
            if state == self._SIZE:
                end = buffer.find(b"\r\n", position)
                if end < 0:
                    if size - position > MAX_CHUNK_LINE:
                        raise ValueError("chunk size line too long")
                    break
                digits = buffer[position:end]
                if not digits or digits.strip(_HEX_DIGITS):
                    digits = _chunk_size_digits(digits)  # extensions, spaces, or malformed
                position = end + 2
                length = int(digits, 16)
                if not length:
                    self._state = self._TRAILER
                    continue
                data_end = position + length
                if data_end + 2 <= size:
                    # The common case: the whole chunk is here, take it in one step.
                    if buffer[data_end : data_end + 2] != b"\r\n":
                        raise ValueError("chunk data not followed by CRLF")
                    out.append(buffer[position:data_end])
                    position = data_end + 2
                    continue
                self._remaining = length
                self._state = self._DATA
            elif state == self._DATA:
                end = min(size, position + self._remaining)
                out.append(buffer[position:end])
                self._remaining -= end - position
                position = end
                if not self._remaining:
                    self._state = self._DATA_END
            elif state == self._DATA_END:
                if size - position < 2:
                    break
                if buffer[position : position + 2] != b"\r\n":
                    raise ValueError("chunk data not followed by CRLF")
                position += 2
                self._state = self._SIZE
            else:  # trailers, ending with an empty line
                end = buffer.find(b"\r\n", position)
                if end < 0:
                    if size - position > MAX_CHUNK_LINE:
                        raise ValueError("trailer line too long")
                    break
                self.done = end == position
                position = end + 2
        self._buffer = buffer[position:]
        if not out:
            return b""
        return out[0] if len(out) == 1 else b"".join(out)

    @staticmethod
    def _whole_chunks(buffer: bytes, out: list[bytes]) -> int:
        """The common case, a run of whole chunks with bare sizes, in a tight loop: appends
        their data to ``out`` and returns where the first other thing starts (the last chunk,
        a part, an extension, an error), for ``feed``'s state machine to read."""
        position = 0
        find = buffer.find
        while (end := find(b"\r\n", position)) >= 0:
            digits = buffer[position:end]
            if not digits or digits.strip(_HEX_DIGITS):
                break
            length = int(digits, 16)
            data_end = end + 2 + length
            if not length or buffer[data_end : data_end + 2] != b"\r\n":
                break
            out.append(buffer[end + 2 : data_end])
            position = data_end + 2
        return position


class Exchange:
    """One request/response on a connection: parses the head, then frames the body."""

    __slots__ = (
        "_buffer",
        "_chunked",
        "_remaining",
        "_state",
        "finished",
        "future",
        "keep_alive",
        "received",
        "sink",
    )

    _HEAD, _LENGTH, _CHUNKED, _UNTIL_CLOSE, _DONE = range(5)

    def __init__(self, sink: ResponseSink, future: asyncio.Future):
        self.sink = sink
        self.future = future
        self.received = 0
        self.keep_alive = False
        self.finished = False  # read once per read: an attribute, not a property
        self._state = self._HEAD
        self._buffer = b""
        self._remaining = 0
        self._chunked: ChunkedDecoder | None = None

    def feed(self, data: bytes, now: float) -> None:
        """Consumes bytes; raises ``HttpError`` on malformed framing."""
        self.received += len(data)
        state = self._state
        if state == self._CHUNKED:
            try:
                payload = self._chunked.feed(data)
            except ValueError as exc:
                raise HttpError("malformed_http", f"chunked encoding: {exc}") from None
            if payload:
                self.sink.on_body(payload, now)
            if self._chunked.done:
                self._finish()
        elif state == self._LENGTH:
            piece = data[: self._remaining]
            self._remaining -= len(piece)
            if piece:
                self.sink.on_body(piece, now)
            if not self._remaining:
                self._finish()
        elif state == self._UNTIL_CLOSE:
            self.sink.on_body(data, now)
        elif state == self._HEAD:
            self._feed_head(data, now)
        # Bytes after a complete response are ignored: we never pipeline.

    def _feed_head(self, data: bytes, now: float) -> None:
        buffer = self._buffer + data
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise HttpError("malformed_http", "response head too large")
            self._buffer = buffer
            return
        head, rest = buffer[:end], buffer[end + 4 :]
        self._buffer = b""
        status, version, headers = _parse_head(head)
        if 100 <= status < 200 and status != 101:
            if rest:
                self._feed_head(rest, now)  # an interim response: the real one follows
            return
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            self.keep_alive = "keep-alive" in connection
        else:
            self.keep_alive = "close" not in connection
        self.sink.on_head(status, headers)
        encoding = headers.get("transfer-encoding", "").lower()
        if status in (204, 304):
            self._finish()
        elif encoding.rsplit(",", 1)[-1].strip() == "chunked":
            self._state = self._CHUNKED
            self._chunked = ChunkedDecoder()
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise HttpError("malformed_http", "bad Content-Length") from None
            if self._remaining < 0:
                raise HttpError("malformed_http", "bad Content-Length")
            self._state = self._LENGTH
            if not self._remaining:
                self._finish()
        else:
            self._state = self._UNTIL_CLOSE
            self.keep_alive = False
        if rest and self._state != self._DONE:
            self.feed(rest, now)
            self.received -= len(rest)  # counted once already

    def connection_closed(self) -> None:
        """The peer closed: that ends a close-framed body, and cuts any other short."""
        if self._state == self._UNTIL_CLOSE:
            self._finish()
        elif self._state != self._DONE:
            where = "before the response head" if self._state == self._HEAD else "mid-body"
            raise HttpError("stream_ended_early", f"connection closed {where}")

    def _finish(self) -> None:
        self._state = self._DONE
        self.finished = True
        self.sink.on_end()


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise HttpError("malformed_http", f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon:
            raise HttpError("malformed_http", f"bad header line {line[:80]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(parts[1]), parts[0], headers
