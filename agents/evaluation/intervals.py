"""How sure a score is: 95 % intervals for a set's score and for the difference between two
configurations' scores on the same items.

The unit of sampling is the item: the interval says what another draw of items like these
would score, not what regenerating the same items would (generation is greedy and seeded).

- ``score_interval``: the Wilson score interval on the mean. For pass/fail items that is
  Wilson's interval for a proportion. A partial score (a judge's n of ``max_score``) has a
  variance of at most p(1 − p) for a mean p, the variance of pass/fail items with that mean,
  so the same interval covers it conservatively; it stays inside [0, 1] and is not degenerate
  at 0 or 1 (where the normal approximation would claim certainty).
- ``paired_difference``: the mean per-item difference (candidate − reference) with Student's
  t interval over the items both scored; pairing removes the items' own difficulty from the
  spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """An estimate and its two-sided interval at ``CONFIDENCE``, over ``n`` items."""

    value: float
    low: float
    high: float
    n: int


def wilson(successes: float, n: int, confidence: float = CONFIDENCE) -> Interval:
    """Wilson's score interval for ``successes`` of ``n`` (a fractional count allowed: the
    sum of scores from 0 to 1)."""
    if n <= 0:
        raise ValueError("an interval needs at least one item")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be from 0 to {n}, got {successes}")
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # The interval holds p exactly; rounding can leave an end a hair inside it (all 80 of
    # the arithmetic pack right gave a high of 0.9999999999999999), which the protocol's
    # summary rightly refuses.
    return Interval(p, min(p, max(0.0, centre - half)), max(p, min(1.0, centre + half)), n)


def score_interval(scores: Sequence[float]) -> Interval:
    """The mean of ``scores`` (each from 0 to 1) and its interval (module docstring)."""
    return wilson(math.fsum(scores), len(scores))


def paired_difference(differences: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of per-item ``differences`` and Student's t interval on it; with one item,
    or all differences equal, the interval is the mean itself."""
    n = len(differences)
    if n == 0:
        raise ValueError("a difference needs at least one item scored by both")
    mean = math.fsum(differences) / n
    if n == 1:
        return Interval(mean, mean, mean, 1)
    spread = math.sqrt(math.fsum((d - mean) ** 2 for d in differences) / (n - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * spread / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)
