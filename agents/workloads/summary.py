"""What a trace holds, in numbers a page can draw: ``summarize_trace`` (the site stores it at
upload and previews it; pure, no I/O), and ``summarize_sessions`` for an agentic session
file.

Guarantees, for any ``Trace`` (``agents.workloads.traces``, so at least one request):

- The result is plain JSON (dicts, lists, ints, finite floats, ``None``), the same for the
  same trace; it never raises.
- ``input_len`` and ``output_len``: min, mean, p50, p99 (linear interpolation between
  closest ranks, as the load generator's percentiles) and max, and a histogram of
  ``HISTOGRAM_BINS`` equal bins from the min to the max: bin ``i`` holds the lengths ``x``
  with ``edges[i] <= x < edges[i + 1]``, the last bin its upper edge too, so the counts add
  up to the requests.
- ``arrivals``: requests counted per bucket of ``bucket_seconds`` (1, 2 or 5 × a power of
  ten, the smallest that needs at most ``MAX_ARRIVAL_BUCKETS`` buckets, and never under
  ``MIN_BUCKET_SECONDS``; 1 s when every request arrives at once) from the first request
  on; the counts add up to the requests.
- ``shared_prefix_share``: the input tokens of blocks whose hash id an earlier request
  already listed, over all input tokens (0 to 1; 0 for a format without hash ids). A block
  holds ``block_size`` tokens, a request's last one what is left of its input.
- ``mean_rate`` is None when every request arrives at once (the trace's rate is infinite).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from agents.workloads.agentic import AgenticTrace
from agents.workloads.traces import Trace, TraceRequest

HISTOGRAM_BINS = 20
MAX_ARRIVAL_BUCKETS = 120
# The finest bucket drawn: a microsecond, the finest time a trace format records (Azure's
# timestamps are read to it). Requests closer than that arrive together; a finer width could
# round to 0 (two requests 5e-324 s apart).
MIN_BUCKET_SECONDS = 1e-6


def summarize_trace(trace: Trace) -> dict:
    """The trace's figures (module docstring); JSON-ready."""
    requests = trace.requests
    inputs = [request.input_len for request in requests]
    outputs = [request.output_len for request in requests]
    rate = trace.mean_rate
    return {
        "requests": len(requests),
        "skipped": trace.skipped,
        "span_seconds": trace.span,
        "mean_rate": rate if math.isfinite(rate) else None,
        "input_tokens": sum(inputs),
        "output_tokens": sum(outputs),
        "input_len": _lengths(inputs),
        "output_len": _lengths(outputs),
        "longest_request_tokens": max(i + o for i, o in zip(inputs, outputs, strict=True)),
        "arrivals": _arrivals([request.offset for request in requests]),
        "block_size": trace.block_size,
        "shared_prefix_share": _shared_share(trace),
    }


def _percentile(ordered: Sequence[int], q: float) -> float:
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _lengths(values: list[int]) -> dict:
    ordered = sorted(values)
    low, high = ordered[0], ordered[-1]
    # Lengths are whole numbers: integer arithmetic puts each in its bin exactly. When all
    # are equal the bins span one token, so there are always HISTOGRAM_BINS of them.
    spread = max(high - low, 1)
    counts = [0] * HISTOGRAM_BINS
    for value in ordered:
        counts[min((value - low) * HISTOGRAM_BINS // spread, HISTOGRAM_BINS - 1)] += 1
    return {
        "min": low,
        "mean": sum(ordered) / len(ordered),
        "p50": _percentile(ordered, 50),
        "p99": _percentile(ordered, 99),
        "max": high,
        "histogram": {
            "edges": [low + spread * index / HISTOGRAM_BINS for index in range(HISTOGRAM_BINS + 1)],
            "counts": counts,
        },
    }


def _bucket_seconds(span: float) -> float:
    """The smallest 1-2-5 width that covers ``span`` in at most ``MAX_ARRIVAL_BUCKETS`` and
    is at least ``MIN_BUCKET_SECONDS`` (1 s for a span of 0)."""
    if span <= 0:
        return 1.0
    # The narrowest width that could do, floored before its logarithm is taken: the span
    # over the buckets can be 0 for a span that is not (a denormal one).
    exponent = math.floor(math.log10(max(span / MAX_ARRIVAL_BUCKETS, MIN_BUCKET_SECONDS)))
    while True:
        for step in (1, 2, 5):
            width = step * 10.0**exponent
            if math.floor(span / width) + 1 <= MAX_ARRIVAL_BUCKETS:
                return width
        exponent += 1


def _arrivals(offsets: list[float]) -> dict:
    span = offsets[-1] - offsets[0]
    width = _bucket_seconds(span)
    count = math.floor(span / width) + 1
    counts = [0] * count
    for offset in offsets:
        counts[min(math.floor((offset - offsets[0]) / width), count - 1)] += 1
    return {"bucket_seconds": width, "counts": counts}


def _shared_share(trace: Trace) -> float:
    seen: set[int] = set()
    shared = total = 0
    for request in trace.requests:
        total += request.input_len
        for index, block in enumerate(request.hash_ids):
            if block in seen:
                # A request's last block holds what is left of its input.
                shared += min(trace.block_size, request.input_len - index * trace.block_size)
        seen.update(request.hash_ids)
    return shared / total if total else 0.0


def summarize_sessions(trace: AgenticTrace) -> dict:
    """A session file's figures: ``summarize_trace``'s over all its requests, each counted at
    its session's start (when the later ones arrive depends on the server), with ``sessions``,
    the most requests in one session and ``session_rate`` (sessions started per second;
    None when they all start at once) — ``mean_rate`` is None: requests have no rate of
    their own here."""
    requests = tuple(
        TraceRequest(session.start, r.input_len, r.output_len, r.hash_ids)
        for session in trace.sessions
        for r in session.requests
    )
    rate = trace.mean_rate
    return summarize_trace(Trace("agentic_trace", requests, trace.block_size)) | {
        "mean_rate": None,
        "sessions": len(trace.sessions),
        "max_session_requests": max(len(session.requests) for session in trace.sessions),
        "session_rate": rate if math.isfinite(rate) else None,
    }
