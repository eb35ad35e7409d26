"""One load level's result: vLLM's benchmark keys computed from the request records.

Guarantees:

- Key names and meanings follow ``vllm bench serve`` (see REFERENCE.md): ``duration``,
  ``completed``, ``failed``, token totals, throughputs, goodput,
  ``{mean,median,std,p90,p95,p99}_{ttft,tpot,itl,e2el}_ms``, ``max_output_tokens_per_s``
  (content messages per 1 s bucket from the level's first request) and
  ``max_concurrent_requests``. Ours: the exact peak of requests in flight at once
  (vLLM counts requests active within the same 1 s bucket, which reads higher).
- ITL is pooled over all requests; TPOT is per request from ``usage.completion_tokens``.
- Token totals count successful requests only and use the server's ``usage`` figures
  (falling back to our prompt estimate and the content-message count when it sent none).
- Goodput counts successful requests meeting every SLO given. With no SLO it is ``None``.
- ``errors`` maps each failure kind to its count and one sample message;
  ``output_len_mismatch`` is ``None`` unless some request was served a different number of
  tokens than it asked for (servers that ignore ``ignore_eos`` or cap ``max_tokens``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from agents.loadgen.records import RequestRecord
from agents.loadgen.stats import percentile, summarize
from agents.protocol import Slos

METRICS = ("ttft", "tpot", "itl", "e2el")


def _request_meets_slos(record: RequestRecord, slos: Slos) -> bool:
    if slos.ttft_ms is not None and record.ttft * 1000 > slos.ttft_ms:
        return False
    # One output token has no TPOT: nothing to miss (vllm bench serve counts it as 0).
    if slos.tpot_ms is not None and (record.tpot or 0.0) * 1000 > slos.tpot_ms:
        return False
    if slos.e2el_ms is not None and record.latency * 1000 > slos.e2el_ms:
        return False
    # Per request, the ITL objective applies to its own p99 gap.
    if slos.itl_ms is None or not record.itl:
        return True
    return percentile(sorted(record.itl), 99) * 1000 <= slos.itl_ms


def _peak_tokens_per_second(records: Sequence[RequestRecord], origin: float) -> int:
    buckets: Counter[int] = Counter()
    for record in records:
        moment = record.start + record.ttft - origin
        buckets[int(moment)] += 1
        for gap in record.itl:
            moment += gap
            buckets[int(moment)] += 1
    return max(buckets.values(), default=0)


def _peak_concurrency(records: Sequence[RequestRecord]) -> int:
    events = sorted(
        [(record.start, 1) for record in records] + [(record.finished, -1) for record in records]
    )
    peak = current = 0
    # At equal times ends (-1) sort first: a request that ends as another starts is not overlap.
    for _, change in events:
        current += change
        peak = max(peak, current)
    return peak


def _errors(records: Sequence[RequestRecord]) -> dict[str, dict]:
    errors: dict[str, dict] = {}
    for record in records:
        if record.success:
            continue
        kind = record.error_kind or "unknown"
        entry = errors.setdefault(kind, {"count": 0, "sample": record.error})
        entry["count"] += 1
    return dict(sorted(errors.items()))


def _output_len_mismatch(successes: Sequence[RequestRecord]) -> dict | None:
    mismatched = [
        record
        for record in successes
        if record.output_tokens is not None and record.output_tokens != record.requested_output_len
    ]
    if not mismatched:
        return None
    first = mismatched[0]
    return {
        "requests": len(mismatched),
        "requested_tokens": sum(record.requested_output_len for record in mismatched),
        "served_tokens": sum(record.output_tokens for record in mismatched),
        "sample": (
            f"request {first.index} asked for {first.requested_output_len} tokens "
            f"and was served {first.output_tokens}"
        ),
    }


def _slo_report(successes: Sequence[RequestRecord], stats: dict, slos: Slos) -> dict | None:
    """Each objective given, against the level's p99."""
    report = {}
    for metric in METRICS:
        target = getattr(slos, f"{metric}_ms")
        if target is not None:
            p99 = stats.get(f"p99_{metric}_ms")
            report[f"{metric}_ms"] = {
                "target": target,
                "p99": p99,
                "met": p99 is not None and p99 <= target,
            }
    return report or None


def level_result(
    level: dict,
    records: Sequence[RequestRecord],
    *,
    duration: float,
    slos: Slos | None = None,
    server: dict | None = None,
) -> dict:
    """The JSON-ready result of one level (``level`` is ``{"concurrency": n}`` or
    ``{"request_rate": r, "burstiness": b}``)."""
    successes = [record for record in records if record.success]
    completed = len(successes)
    input_tokens = sum(record.input_tokens for record in successes)
    output_tokens = sum(record.served_output_tokens for record in successes)
    safe_duration = duration if duration > 0 else math.inf
    samples = {
        "ttft": [record.ttft for record in successes],
        "tpot": [tpot for record in successes if (tpot := record.tpot) is not None],
        "itl": [gap for record in successes for gap in record.itl],
        "e2el": [record.latency for record in successes],
    }
    stats: dict = {}
    for metric in METRICS:
        summary = summarize(samples[metric], scale=1000.0)
        for name in ("mean", "median", "std", "p90", "p95", "p99"):
            stats[f"{name}_{metric}_ms"] = summary[name]
    goodput = None
    if slos is not None and any(getattr(slos, f"{metric}_ms") is not None for metric in METRICS):
        good = sum(1 for record in successes if _request_meets_slos(record, slos))
        goodput = good / safe_duration
    origin = min((record.start for record in records), default=0.0)
    result = dict(level)
    result.update(
        {
            "duration": duration,
            "completed": completed,
            "failed": len(records) - completed,
            "total_input_tokens": input_tokens,
            "total_output_tokens": output_tokens,
            "request_throughput": completed / safe_duration,
            "request_goodput": goodput,
            "output_throughput": output_tokens / safe_duration,
            "total_token_throughput": (input_tokens + output_tokens) / safe_duration,
            "max_output_tokens_per_s": _peak_tokens_per_second(successes, origin),
            "max_concurrent_requests": _peak_concurrency(records),
        }
    )
    result.update(stats)
    result["errors"] = _errors(records)
    result["output_len_mismatch"] = _output_len_mismatch(successes)
    result["usage_missing"] = sum(1 for record in successes if record.output_tokens is None)
    result["slo"] = _slo_report(successes, stats, slos) if slos is not None else None
    result["server"] = server
    return result
