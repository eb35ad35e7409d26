"""How a figure moved between two load levels, and whether the move is more than noise.

Guarantees (pure arithmetic on numbers; the one place it is computed: the site's history
and comparison pages and the CLI's regression gate both import it):

- The change is ``(new − base) ÷ base`` in %; from a base of 0 any rise is +inf.
- Where both figures carry a 95 % interval (a level's ``ci95``), the change's interval is
  taken conservatively from the two: the new low against the base's high, the new high
  against the base's low. It exists only for intervals of non-negative figures (a high may
  be +inf, e.g. a capacity bracket whose search never failed).
- An interval that holds 0 is "within noise"; otherwise the change is "better" or "worse"
  by the figure's direction. Without intervals the point decides, and the wording says so.
- Wording: ``worse by 12 % (CI 8–16 %)``, ``better by 5 % (CI 2–9 %)``,
  ``within noise (CI −3–+4 %)``, ``worse by 12 % (no interval)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WITHIN_NOISE = "within noise"

Interval = tuple[float, float]


def change_pct(new: float, base: float) -> float:
    """``(new − base) ÷ base`` in %; from 0, any rise is +inf (and no change is 0)."""
    if base == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - base) / abs(base) * 100


def _bound_change(value: float, against: float, *, upper: bool) -> float:
    if against > 0:
        return (value / against - 1) * 100
    if value > 0:
        return math.inf
    # 0 against 0: anything from −100 % (the least a non-negative figure can fall) up.
    return math.inf if upper else -100.0


def change_interval_pct(new: Interval, base: Interval) -> Interval | None:
    """The change's interval in % (see the module docstring); None unless both are
    intervals of a non-negative figure."""
    for low, high in (new, base):
        if not (math.isfinite(low) and 0 <= low <= high) or math.isnan(high):
            return None
    return (
        _bound_change(new[0], base[1], upper=False),
        _bound_change(new[1], base[0], upper=True),
    )


def change_verdict(change: float, interval: Interval | None, *, higher_is_better: bool) -> str:
    """``better``, ``worse`` or ``within noise`` (the interval holds 0); without an interval
    the point decides (``same`` when it did not move)."""
    if interval is not None:
        low, high = interval
        if low <= 0 <= high:
            return WITHIN_NOISE
        rose = low > 0
    elif change == 0:
        return "same"
    else:
        rose = change > 0
    return "better" if rose == higher_is_better else "worse"


def _magnitude(pct: float) -> str:
    pct = abs(pct)
    if math.isinf(pct):
        return "∞"
    return f"{pct:.0f}" if pct >= 9.95 else f"{pct:.1f}".removesuffix(".0")


def _signed(pct: float) -> str:
    text = _magnitude(pct)
    if text == "0":
        return text
    return ("+" if pct > 0 else "−") + text


def change_wording(change: float, interval: Interval | None, *, higher_is_better: bool) -> str:
    """The change in words (see the module docstring)."""
    verdict = change_verdict(change, interval, higher_is_better=higher_is_better)
    if interval is None:
        if verdict == "same":
            return "unchanged (no interval)"
        return f"{verdict} by {_magnitude(change)} % (no interval)"
    low, high = interval
    if verdict == WITHIN_NOISE:
        return f"{WITHIN_NOISE} (CI {_signed(low)}–{_signed(high)} %)"
    near, far = sorted((abs(low), abs(high)))
    return f"{verdict} by {_magnitude(change)} % (CI {_magnitude(near)}–{_magnitude(far)} %)"


@dataclass(frozen=True)
class FigureDelta:
    """One figure's move against its base, with its interval when both sides had one."""

    change_pct: float
    interval_pct: Interval | None
    verdict: str  # "better", "worse", "within noise", "same" (no interval, no move)
    text: str


def figure_delta(
    *,
    new: float,
    base: float,
    new_interval: Interval | None,
    base_interval: Interval | None,
    higher_is_better: bool,
) -> FigureDelta:
    """``new`` against ``base``: the change, its interval and the words for both."""
    change = change_pct(new, base)
    interval = (
        change_interval_pct(new_interval, base_interval)
        if new_interval is not None and base_interval is not None
        else None
    )
    return FigureDelta(
        change_pct=change,
        interval_pct=interval,
        verdict=change_verdict(change, interval, higher_is_better=higher_is_better),
        text=change_wording(change, interval, higher_is_better=higher_is_better),
    )
