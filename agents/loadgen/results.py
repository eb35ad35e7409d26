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
- Goodput counts successful requests meeting every latency SLO given; attainment is their
  share of all requests, in %. With no latency SLO both are ``None``.
- Each latency objective is judged at the percentile it names (``Slos.percentile``), by the
  count of requests beyond its target against how many were measured, met, missed or too
  close to call at the SLOs' confidence (``agents.protocol.slo_verdicts``); its ``value`` is
  that percentile, ``p99`` always the level's p99.
- Throughputs may come from other requests than the latencies (``throughput_records``:
  a steady window's throughput counts the requests that ended inside it).
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
from agents.protocol import LATENCY_METRICS, Slos, percentile_statistic
from agents.protocol.slo_verdicts import (
    ATTAINMENT,
    MET,
    allowed_share,
    objective_verdict,
    span_counts,
)

METRICS = LATENCY_METRICS


def request_meets_slos(record: RequestRecord, slos: Slos) -> bool:
    """Whether one successful request meets every latency target (as goodput counts)."""
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


def _slo_report(
    samples: dict[str, list[float]],
    stats: dict,
    slos: Slos,
    misses: list[bool],
    attainment_pct: float | None,
) -> dict | None:
    """Each objective given: a latency target against the percentile it names, and the
    attainment; each with its counts and its verdict at the SLOs' confidence."""
    report = {}
    confidence = slos.confidence
    for metric, target in slos.latency_targets.items():
        percentile = slos.percentile(metric)
        flags = [value * 1000 > target for value in samples[metric]]
        beyond, spans = sum(flags), span_counts(flags)
        verdict = objective_verdict(
            beyond, len(flags), allowed_share(percentile=percentile), confidence, spans
        )
        report[f"{metric}_ms"] = {
            "target": target,
            "p99": stats.get(f"p99_{metric}_ms"),
            "percentile": percentile,
            "value": stats.get(f"{percentile_statistic(percentile)}_{metric}_ms"),
            "met": verdict == MET,
            "judged": len(flags),
            "beyond": beyond,
            "spans": spans,
            "verdict": verdict,
            "confidence_pct": confidence,
        }
    if slos.min_attainment_pct is not None:
        target = slos.min_attainment_pct
        missing, spans = sum(misses), span_counts(misses)
        verdict = objective_verdict(
            missing, len(misses), allowed_share(attainment_pct=target), confidence, spans
        )
        report[ATTAINMENT] = {
            "target": target,
            "value": attainment_pct,
            "met": verdict == MET,
            "judged": len(misses),
            "beyond": missing,
            "spans": spans,
            "verdict": verdict,
            "confidence_pct": confidence,
        }
    return report or None


def level_result(
    level: dict,
    records: Sequence[RequestRecord],
    *,
    duration: float,
    slos: Slos | None = None,
    server: dict | None = None,
    throughput_records: Sequence[RequestRecord] | None = None,
) -> dict:
    """The JSON-ready result of one level (``level`` is ``{"concurrency": n}`` or
    ``{"request_rate": r, "burstiness": b}``); throughputs count ``throughput_records``
    (default: ``records``) over ``duration``."""
    successes = [record for record in records if record.success]
    served = (
        successes if throughput_records is None else [r for r in throughput_records if r.success]
    )
    completed = len(successes)
    input_tokens = sum(record.input_tokens for record in successes)
    output_tokens = sum(record.served_output_tokens for record in successes)
    served_input = sum(record.input_tokens for record in served)
    served_output = sum(record.served_output_tokens for record in served)
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
    goodput = attainment = None
    # Per request, in the order sent: whether it missed some target (a failed one, all).
    misses = [
        not (record.success and request_meets_slos(record, slos))
        for record in (records if slos is not None else ())
    ]
    if slos is not None and slos.latency_targets:
        good = len(misses) - sum(misses)
        goodput = good / safe_duration
        attainment = 100.0 * good / len(records) if records else None
    origin = min((record.start for record in records), default=0.0)
    result = dict(level)
    result.update(
        {
            "duration": duration,
            "completed": completed,
            "failed": len(records) - completed,
            "total_input_tokens": input_tokens,
            "total_output_tokens": output_tokens,
            "request_throughput": len(served) / safe_duration,
            "request_goodput": goodput,
            "output_throughput": served_output / safe_duration,
            "total_token_throughput": (served_input + served_output) / safe_duration,
            "max_output_tokens_per_s": _peak_tokens_per_second(successes, origin),
            "max_concurrent_requests": _peak_concurrency(records),
        }
    )
    result.update(stats)
    result["errors"] = _errors(records)
    result["output_len_mismatch"] = _output_len_mismatch(successes)
    result["usage_missing"] = sum(1 for record in successes if record.output_tokens is None)
    result["slo_attainment_pct"] = attainment
    result["slo"] = (
        _slo_report(samples, stats, slos, misses, attainment) if slos is not None else None
    )
    result["server"] = server
    return result
