"""Request traces as published: Mooncake JSONL, BurstGPT CSV and the Azure LLM inference
trace CSV, read into one shape (``Trace``) that the load generator replays and the site
previews.

Guarantees:

- ``parse_trace`` returns every usable request, in send order (stable for equal times), with
  offsets in seconds from the first one (which is at 0), or raises ``TraceError`` naming the
  line (1 is the first line of the file, a CSV's header) and the field it could not use —
  never another exception, whatever bytes it is given.
- Lengths are whole numbers within the protocol's bounds; times are finite and not negative.
- Rows with nothing to send or to generate are left out and counted (``Trace.skipped``):
  BurstGPT's failed requests and Azure rows with 0 tokens, and the rows BurstGPT's ``model``
  / ``log_type`` filters exclude. A trace with nothing left is refused.
- Mooncake ``hash_ids``: request blocks of ``block_size`` tokens; equal ids are identical
  blocks. A request lists at most one id per block of its input.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import get_args

from agents.protocol import (
    MAX_BLOCK_SIZE,
    MAX_INPUT_LEN,
    MAX_OUTPUT_LEN,
    MOONCAKE_BLOCK_SIZE,
    TRACE_FORMATS,
    BurstGptLogType,
    json_loads_bounded,
)

# More requests than a day at a busy service's rate is not a trace this tool replays.
MAX_TRACE_REQUESTS = 2_000_000
BURSTGPT_LOG_TYPES: tuple[str, ...] = get_args(BurstGptLogType)

_BURSTGPT_COLUMNS = ("Timestamp", "Model", "Request tokens", "Response tokens", "Log Type")
_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


class TraceError(ValueError):
    """A trace file that cannot be used: ``line`` (1-based) and ``field`` say where."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None):
        self.line, self.field, self.reason = line, field, message
        where = " ".join(
            part for part in (f"line {line}:" if line else "", f"{field}:" if field else "") if part
        )
        super().__init__(f"{where} {message}" if where else message)


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace: when (seconds from the trace's first), how long its prompt
    and reply are (tokens), and its prompt's block hash ids (Mooncake; else none)."""

    offset: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Trace:
    """A parsed trace: its requests in send order, the tokens each hash id stands for, and
    how many rows the format's own rules left out."""

    format: str
    requests: tuple[TraceRequest, ...]
    block_size: int = MOONCAKE_BLOCK_SIZE
    skipped: int = 0

    @property
    def span(self) -> float:
        """Seconds from the first request to the last (0 for one request)."""
        return self.requests[-1].offset - self.requests[0].offset if self.requests else 0.0

    @property
    def mean_rate(self) -> float:
        """Requests per second over the span (``math.inf`` when all arrive at once)."""
        if len(self.requests) < 2 or self.span <= 0:
            return math.inf
        return (len(self.requests) - 1) / self.span

    def window(self, start: float = 0.0, duration: float | None = None) -> Trace:
        """The requests sent from ``start`` seconds on, for ``duration`` seconds (to the end
        when None), their offsets counted from the first of them. Raises ``TraceError`` when
        the window holds none."""
        end = math.inf if duration is None else start + duration
        chosen = [r for r in self.requests if start <= r.offset < end]
        if not chosen:
            raise TraceError(
                f"no request in the window from {start:g} s"
                + ("" if duration is None else f" for {duration:g} s")
                + f" (the trace spans {self.span:g} s)"
            )
        origin = chosen[0].offset
        return replace(self, requests=tuple(replace(r, offset=r.offset - origin) for r in chosen))


def parse_trace(
    data: bytes,
    trace_format: str,
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    model: str | None = None,
    log_type: str | None = None,
) -> Trace:
    """The trace in ``data`` (a file's bytes, UTF-8) of ``trace_format``; ``block_size``
    for Mooncake's hash ids, ``model`` and ``log_type`` to keep only those BurstGPT rows."""
    if trace_format not in TRACE_FORMATS:
        raise TraceError(f"format {trace_format!r} is not one of {', '.join(TRACE_FORMATS)}")
    if not 1 <= block_size <= MAX_BLOCK_SIZE:
        raise TraceError(f"block_size must be 1 to {MAX_BLOCK_SIZE}, got {block_size}")
    text = _text(data)
    if trace_format == "mooncake":
        rows, skipped = _mooncake(text, block_size), 0
    elif trace_format == "burstgpt":
        rows, skipped = _burstgpt(text, model, log_type)
    else:
        rows, skipped = _azure(text)
    if not rows:
        raise TraceError(
            "no usable request" + (f" ({skipped} rows left out by the filters)" if skipped else "")
        )
    rows.sort(key=lambda row: row.offset)  # stable: equal times keep the file's order
    origin = rows[0].offset
    requests = tuple(replace(row, offset=row.offset - origin) for row in rows)
    return Trace(trace_format, requests, block_size, skipped)


def _whole(value: object, line: int, field: str, low: int, high: int) -> int:
    """A whole number from JSON or CSV text ("12" and "12.0" are 12)."""
    number = value
    if isinstance(value, str):
        text = value.strip()
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                number = None
    if isinstance(number, float) and math.isfinite(number) and number.is_integer():
        number = int(number)
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise TraceError(
            f"must be a whole number from {low:,} to {high:,}, got {_shown(value)}",
            line=line,
            field=field,
        )
    return number


def _seconds(value: object, line: int, field: str, scale: float = 1.0) -> float:
    """A time that is a finite number of units, not negative, in seconds."""
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, int | float):
        raise TraceError(f"must be a number, got {_shown(value)}", line=line, field=field)
    try:
        number = float(number)
    except OverflowError:  # a whole number past the largest float
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise TraceError(
            f"must be a finite number of 0 or more, got {_shown(value)}", line=line, field=field
        )
    return number * scale


def _shown(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@contextmanager
def _reading(line: int) -> Iterator[None]:
    """Whatever reading line ``line`` raises is a ``TraceError`` naming that line: the
    checks above name the field where they can; this holds the module's promise (no other
    exception) for a value no check foresaw."""
    try:
        yield
    except TraceError:
        raise
    except (ArithmeticError, ValueError, RecursionError) as error:
        raise TraceError(f"cannot be read ({type(error).__name__})", line=line) from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    count = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            count += 1
            if count > MAX_TRACE_REQUESTS:
                raise TraceError(f"more than {MAX_TRACE_REQUESTS:,} requests", line=number)
            yield number, line


def _text(data: bytes) -> str:
    """A file's text (UTF-8, a byte-order mark allowed)."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise TraceError("the file is not UTF-8 text", line=line) from None


def _json_lines(text: str, required: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
    """Each non-blank line of a JSONL file as an object holding ``required``, with its
    line number."""
    for number, line in _lines(text):
        try:
            # Bounded in depth: the standard decoder recurses once per bracket.
            item = json_loads_bounded(line)
        except ValueError as error:
            raise TraceError(f"not JSON ({error.args[0]})", line=number) from None
        if not isinstance(item, dict):
            raise TraceError("each line is a JSON object", line=number)
        for key in required:
            if key not in item:
                raise TraceError("missing", line=number, field=key)
        yield number, item


def _lengths_and_blocks(
    item: dict, number: int, block_size: int
) -> tuple[int, int, tuple[int, ...]]:
    """A JSONL request's ``input_length``, ``output_length`` and ``hash_ids`` (at most one
    per block of its input)."""
    input_len = _whole(item["input_length"], number, "input_length", 1, MAX_INPUT_LEN)
    output_len = _whole(item["output_length"], number, "output_length", 1, MAX_OUTPUT_LEN)
    raw_ids = item.get("hash_ids", [])
    if not isinstance(raw_ids, list):
        raise TraceError(
            f"must be a list of block ids, got {_shown(raw_ids)}", line=number, field="hash_ids"
        )
    hash_ids = tuple(
        _whole(value, number, f"hash_ids[{index}]", 0, 2**63 - 1)
        for index, value in enumerate(raw_ids)
    )
    blocks = math.ceil(input_len / block_size)
    if len(hash_ids) > blocks:
        raise TraceError(
            f"lists {len(hash_ids)} blocks, but {input_len} input tokens fill only "
            f"{blocks} of {block_size} tokens",
            line=number,
            field="hash_ids",
        )
    return input_len, output_len, hash_ids


def _mooncake(text: str, block_size: int) -> list[TraceRequest]:
    rows = []
    for number, item in _json_lines(text, ("timestamp", "input_length", "output_length")):
        with _reading(number):
            offset = _seconds(item["timestamp"], number, "timestamp", scale=0.001)
            rows.append(TraceRequest(offset, *_lengths_and_blocks(item, number, block_size)))
    return rows


def _csv_rows(text: str, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """Each data row of a CSV with a header naming at least ``columns`` (surrounding spaces
    ignored), with its line number."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise TraceError("the file is empty")
        names = [name.strip() for name in header]
        for column in columns:
            if column not in names:
                raise TraceError(
                    f"the header has no column {column!r} (it names {', '.join(names)})",
                    line=1,
                )
        place = {column: names.index(column) for column in columns}
        count = 0
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            count += 1
            if count > MAX_TRACE_REQUESTS:
                raise TraceError(f"more than {MAX_TRACE_REQUESTS:,} requests", line=reader.line_num)
            if len(row) < len(names):
                raise TraceError(
                    f"has {len(row)} values, the header names {len(names)}", line=reader.line_num
                )
            yield reader.line_num, {column: row[index] for column, index in place.items()}
    except csv.Error as error:
        raise TraceError(f"not CSV ({error})", line=reader.line_num) from None


def _burstgpt(text: str, model: str | None, log_type: str | None) -> tuple[list[TraceRequest], int]:
    rows, skipped = [], 0
    for number, row in _csv_rows(text, _BURSTGPT_COLUMNS):
        with _reading(number):
            offset = _seconds(row["Timestamp"], number, "Timestamp")
            request = _whole(row["Request tokens"], number, "Request tokens", 0, MAX_INPUT_LEN)
            response = _whole(row["Response tokens"], number, "Response tokens", 0, MAX_OUTPUT_LEN)
        if (
            (model is not None and row["Model"].strip() != model)
            or (log_type is not None and row["Log Type"].strip() != log_type)
            # BurstGPT logs failed requests with 0 tokens: nothing to replay.
            or request == 0
            or response == 0
        ):
            skipped += 1
            continue
        rows.append(TraceRequest(offset, request, response))
    return rows, skipped


def _azure_time(value: str, line: int) -> datetime:
    """``2023-11-16 18:15:46.6805900``: seven fractional digits, which Python's ISO reader
    does not take; microseconds are enough."""
    text = value.strip()
    head, dot, fraction = text.partition(".")
    if dot:
        text = f"{head}.{fraction[:6]}"
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise TraceError(
            f"must be a date and time like 2023-11-16 18:15:46.6805900, got {_shown(value)}",
            line=line,
            field="TIMESTAMP",
        ) from None
    return moment.replace(tzinfo=None)


def _azure(text: str) -> tuple[list[TraceRequest], int]:
    rows, skipped, first = [], 0, None
    for number, row in _csv_rows(text, _AZURE_COLUMNS):
        with _reading(number):
            moment = _azure_time(row["TIMESTAMP"], number)
            first = moment if first is None else first
            context = _whole(row["ContextTokens"], number, "ContextTokens", 0, MAX_INPUT_LEN)
            generated = _whole(row["GeneratedTokens"], number, "GeneratedTokens", 0, MAX_OUTPUT_LEN)
            # Offsets from the first row; sorting (in parse_trace) makes the earliest one 0.
            offset = (moment - first).total_seconds()
        if context == 0 or generated == 0:
            skipped += 1  # nothing to send or nothing to generate
            continue
        rows.append(TraceRequest(offset, context, generated))
    return rows, skipped
