"""95 % confidence intervals of a level's headline figures, by bootstrap over its requests
(SciPy's ``stats.bootstrap``, percentile method).

Guarantees:

- Keys are the ``LevelResult`` fields they bound:
  ``{median,p90,p95,p99}_{ttft,tpot,itl,e2el}_ms``,
  ``output_throughput``, and with latency SLOs ``request_goodput``
  and ``slo_attainment_pct``; each ``{"low": …, "high": …}``.
- Requests are the resampled unit, so a figure's interval reflects how many requests the
  level measured. ITL too: its samples are the gaps of a few requests, not independent
  draws, so its percentiles are bootstrapped over requests (each resample pools the gaps of
  the requests it drew; a cluster bootstrap on NumPy's generator), never over gaps, which
  would claim a certainty the level does not have. A level with very many gaps gets fewer
  resamples (at least ``MIN_ITL_RESAMPLES``), taken in chunks that bound the memory.
- Deterministic: the resampling is seeded, so the same requests give the same intervals.
- A figure with fewer than ``MIN_SAMPLES`` samples, or whose samples are all equal, has no
  interval (a single value is not evidence of spread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from agents.loadgen.records import RequestRecord
from agents.loadgen.results import request_meets_slos
from agents.protocol import Slos

MIN_SAMPLES = 5
RESAMPLES = 999
CONFIDENCE = 0.95
MIN_ITL_RESAMPLES = 199
# Resamples × gaps the ITL bootstrap computes (its CPU) and holds at once (int64: 32 MB).
ITL_CELLS = 4_000_000
# Percentiles with an interval, by the statistic name LevelResult gives them.
_PERCENTILES = {"median": 50, "p90": 90, "p95": 95, "p99": 99}
_PER_REQUEST = {
    "ttft": lambda record: record.ttft,
    "tpot": lambda record: record.tpot,
    "e2el": lambda record: record.latency,
}


def _interval(
    samples: Sequence[float], statistic: Callable[[np.ndarray, int], np.ndarray]
) -> dict[str, float] | None:
    data = np.asarray(samples, dtype=float)
    if data.size < MIN_SAMPLES or np.all(data == data[0]):
        return None
    result = stats.bootstrap(
        (data,),
        lambda sample, axis: statistic(sample, axis),
        n_resamples=RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        vectorized=True,
        rng=np.random.default_rng(0),
    )
    low, high = result.confidence_interval
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    return {"low": float(low), "high": float(high)}


def confidence_intervals(
    measured: Sequence[RequestRecord],
    served: Sequence[RequestRecord],
    duration: float,
    slos: Slos | None,
) -> dict[str, dict[str, float]]:
    """Intervals of the figures of a level whose latencies come from ``measured`` and whose
    throughputs from ``served`` over ``duration`` seconds (see the module docstring)."""
    intervals: dict[str, dict[str, float] | None] = {}
    successes = [record for record in measured if record.success]
    for metric, read in _PER_REQUEST.items():
        values = [value * 1000 for record in successes if (value := read(record)) is not None]
        for name, q in _PERCENTILES.items():
            intervals[f"{name}_{metric}_ms"] = _interval(
                values, lambda sample, axis, q=q: np.percentile(sample, q, axis=axis)
            )
    intervals.update(_itl_intervals(successes))
    if duration > 0:
        done = [record for record in served if record.success]
        count = len(done)
        tokens = [record.served_output_tokens for record in done]
        intervals["output_throughput"] = _interval(
            tokens, lambda sample, axis: np.mean(sample, axis=axis) * count / duration
        )
    if slos is not None and slos.latency_targets and measured:
        good = [1.0 if r.success and request_meets_slos(r, slos) else 0.0 for r in measured]
        if duration > 0:
            intervals["request_goodput"] = _interval(
                good, lambda sample, axis: np.sum(sample, axis=axis) / duration
            )
        intervals["slo_attainment_pct"] = _interval(
            good, lambda sample, axis: np.mean(sample, axis=axis) * 100
        )
    return {key: value for key, value in intervals.items() if value is not None}


def _itl_intervals(successes: Sequence[RequestRecord]) -> dict[str, dict[str, float] | None]:
    """ITL percentiles' intervals by a bootstrap over requests (see the module docstring)."""
    gaps_of = [np.asarray(record.itl, dtype=float) * 1000 for record in successes if record.itl]
    count = len(gaps_of)
    if count < MIN_SAMPLES:
        return {}
    gaps = np.concatenate(gaps_of)
    owner = np.repeat(np.arange(count), [len(g) for g in gaps_of])
    order = np.argsort(gaps, kind="stable")
    gaps, owner = gaps[order], owner[order]
    if gaps[0] == gaps[-1]:
        return {}
    resamples = int(min(RESAMPLES, max(MIN_ITL_RESAMPLES, ITL_CELLS // gaps.size)))
    chunk = max(1, ITL_CELLS // gaps.size)
    rng = np.random.default_rng(0)
    # How often each resample drew each request; a gap weighs as much as its request.
    drawn = rng.multinomial(count, np.full(count, 1 / count), size=resamples)
    values = {name: [] for name in _PERCENTILES}
    for first in range(0, resamples, chunk):
        cumulative = np.cumsum(drawn[first : first + chunk][:, owner], axis=1)
        totals = cumulative[:, -1]
        for name, q in _PERCENTILES.items():
            # Each resample's q-th percentile of its pooled gaps (the inverted CDF).
            ranks = np.argmax(cumulative >= (q / 100 * totals)[:, None], axis=1)
            values[name].append(gaps[ranks])
    tail = (1 - CONFIDENCE) / 2 * 100
    intervals = {}
    for name, found in values.items():
        low, high = np.percentile(np.concatenate(found), [tail, 100 - tail])
        intervals[f"{name}_itl_ms"] = {"low": float(low), "high": float(high)}
    return intervals
