"""95 % confidence intervals of a level's headline figures, by bootstrap over its requests
(SciPy's ``stats.bootstrap``, percentile method).

Guarantees:

- Keys are the ``LevelResult`` fields they bound: ``{median,p90,p95,p99}_{ttft,tpot,e2el}_ms``,
  ``output_throughput``, and with latency SLOs ``request_goodput``
  and ``slo_attainment_pct``; each ``{"low": …, "high": …}``.
- Requests are the resampled unit, so a figure's interval reflects how many requests the
  level measured. ITL has none: its samples are the gaps of a few requests, not independent
  draws, and a bootstrap over gaps would claim a certainty the level does not have.
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
