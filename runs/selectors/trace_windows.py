"""The part of an uploaded trace a workload replays, read from the stored file exactly as the
agent reads it: ``agents.workloads.parse_trace`` with the workload's options (block size,
BurstGPT filters), then ``Trace.window(start_seconds, duration_seconds)``. The one reading
that the experiment check (``runs.experiment_spec``) and the estimate
(``runs.selectors.estimates``) share.

Guarantees:

- ``trace_window`` returns the window's figures (``TraceWindow``) or raises
  ``TraceWindowError`` naming the workload's dataset field at fault: ``model`` or
  ``log_type`` when the filters leave no request, ``block_size`` when the file's hash ids do
  not fit blocks of that size, ``start_seconds`` when the window starts after the last
  request, ``duration_seconds`` when it is too short to hold one, ``dataset_id`` when the
  stored file cannot be read. It never raises anything else for a stored trace.
- A file is parsed once per process for each set of options and kept (at most
  ``_PARSED_KEPT`` of them, about 16 bytes a request): a trace never changes once uploaded
  (its key is the file and its SHA-256), and the builder checks on every change.
"""

from __future__ import annotations

import bisect
from array import array
from dataclasses import dataclass, field
from functools import lru_cache

from agents.protocol import MOONCAKE_BLOCK_SIZE, TraceDataset
from agents.workloads import TraceError, parse_trace
from runs.models import WorkloadDataset

_PARSED_KEPT = 4


class TraceWindowError(Exception):
    """The workload's options cannot be replayed on its trace: ``field`` (a key of the
    workload's dataset) says which is at fault, ``message`` why."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field, self.message = field, message


@dataclass(frozen=True)
class TraceWindow:
    """The requests a workload's window sends, every level once (open loop) or in order
    (closed loop)."""

    requests: int
    span_seconds: float
    mean_input_len: float
    mean_output_len: float
    # Each request's prompt + output tokens, in ascending order.
    totals: array = field(repr=False)

    @property
    def longest_tokens(self) -> int:
        """The largest prompt + output of one request."""
        return self.totals[-1]

    def over(self, context: int) -> int:
        """How many requests' prompt + output exceed ``context`` tokens."""
        return len(self.totals) - bisect.bisect_right(self.totals, context)


@dataclass(frozen=True)
class _Parsed:
    offsets: array  # seconds from the first request, ascending
    inputs: array
    outputs: array


@lru_cache(maxsize=_PARSED_KEPT)
def _parsed(storage, name: str, sha256: str, options: tuple) -> _Parsed | TraceError:
    """The trace in ``name`` read with ``options`` (format, block size, model, log type), or
    the reader's refusal (kept too: a refusal is as lasting as the file); ``sha256`` makes
    the key say which content it is."""
    trace_format, block_size, model, log_type = options
    with storage.open(name, "rb") as file:
        data = file.read()
    try:
        trace = parse_trace(
            data, trace_format, block_size=block_size, model=model, log_type=log_type
        )
    except TraceError as error:
        return error
    # Lengths are within the protocol's bounds (below 2**31): 4 bytes each.
    return _Parsed(
        array("d", (request.offset for request in trace.requests)),
        array("i", (request.input_len for request in trace.requests)),
        array("i", (request.output_len for request in trace.requests)),
    )


def _read(dataset: WorkloadDataset, spec: TraceDataset, model, log_type) -> _Parsed:
    # Block size only means something to Mooncake's hash ids: one parse serves the others.
    block_size = spec.block_size if spec.kind == "mooncake" else MOONCAKE_BLOCK_SIZE
    options = (spec.kind, block_size, model, log_type)
    try:
        parsed = _parsed(dataset.file.storage, dataset.file.name, dataset.sha256, options)
    except OSError:
        raise TraceWindowError("dataset_id", "The dataset's file cannot be read.") from None
    if isinstance(parsed, TraceError):
        # A fresh one: raising the kept instance again would grow its traceback each time.
        raise TraceError(parsed.reason, line=parsed.line, field=parsed.field)
    return parsed


def _filtered(dataset: WorkloadDataset, spec: TraceDataset) -> _Parsed:
    """The trace read with the workload's options, or the field that leaves nothing."""
    try:
        return _read(dataset, spec, spec.model, spec.log_type)
    except TraceError as error:
        if error.line is not None:
            # Read at the default block size on upload: only another size can refuse it.
            raise TraceWindowError(
                "block_size", f"The trace does not fit blocks of {spec.block_size} tokens: {error}"
            ) from None
        if spec.model is not None and spec.log_type is not None:
            try:
                _read(dataset, spec, spec.model, None)
            except TraceError:
                pass
            else:
                raise TraceWindowError(
                    "log_type",
                    f"No request of model {spec.model!r} has log type {spec.log_type!r}.",
                ) from None
        if spec.model is not None:
            raise TraceWindowError(
                "model", f"No request of this trace has model {spec.model!r}."
            ) from None
        if spec.log_type is not None:
            raise TraceWindowError(
                "log_type", f"No request of this trace has log type {spec.log_type!r}."
            ) from None
        raise TraceWindowError("dataset_id", f"The trace cannot be read: {error}") from None


def trace_window(dataset: WorkloadDataset, spec: TraceDataset) -> TraceWindow:
    """The window of ``dataset`` (a stored trace of ``spec.kind``) that ``spec`` replays
    (module docstring)."""
    parsed = _filtered(dataset, spec)
    start = spec.start_seconds
    first = bisect.bisect_left(parsed.offsets, start)
    if spec.duration_seconds is None:
        last = len(parsed.offsets)
    else:
        last = bisect.bisect_left(parsed.offsets, start + spec.duration_seconds)
    if first >= last:
        span = parsed.offsets[-1]
        if first == len(parsed.offsets):
            raise TraceWindowError(
                "start_seconds",
                f"The trace's last request is at {span:g} s: no request from {start:g} s on.",
            )
        raise TraceWindowError(
            "duration_seconds",
            f"No request from {start:g} s for {spec.duration_seconds:g} s; the next one is "
            f"at {parsed.offsets[first]:g} s.",
        )
    inputs, outputs = parsed.inputs[first:last], parsed.outputs[first:last]
    count = last - first
    return TraceWindow(
        requests=count,
        span_seconds=parsed.offsets[last - 1] - parsed.offsets[first],
        mean_input_len=sum(inputs) / count,
        mean_output_len=sum(outputs) / count,
        totals=array("i", sorted(i + o for i, o in zip(inputs, outputs, strict=True))),
    )
