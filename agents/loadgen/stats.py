"""Summary statistics of latency samples, equal to numpy's defaults without numpy.

Guarantees: ``percentile`` interpolates linearly between closest ranks (numpy's default
``method="linear"``); ``std`` is the population standard deviation (numpy's ``ddof=0``, as
``vllm bench serve`` reports it). An empty sample summarises to ``None`` values, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

PERCENTILES = (90, 95, 99)


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) of an already sorted, non-empty sequence."""
    if not ordered:
        raise ValueError("percentile of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


def summarize(values: Sequence[float], *, scale: float = 1.0) -> dict[str, float | None]:
    """mean, median, std, p90, p95 and p99 of ``values`` multiplied by ``scale``."""
    if not values:
        return {"mean": None, "median": None, "std": None} | {f"p{q}": None for q in PERCENTILES}
    ordered = sorted(value * scale for value in values)
    count = len(ordered)
    mean = math.fsum(ordered) / count
    variance = math.fsum((value - mean) ** 2 for value in ordered) / count
    summary = {"mean": mean, "median": percentile(ordered, 50), "std": math.sqrt(variance)}
    summary.update({f"p{q}": percentile(ordered, q) for q in PERCENTILES})
    return summary
