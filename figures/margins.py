"""The answer's margin in words, as the run page, the promotion page, the demo and
``benchsite runs show`` say it.

Guarantee: a margin is the other configuration's extra cost at capacity in % of the
winner's, and is said so: "OTHER costs 89 % more", never "cheaper by 89 %" (which reads as
the winner at 11 % of the cost when it is at 53 %). A margin within noise is a tie, said with
how far apart the two are. Whole percents by default; a bound that rounds to 0 is 0,
never "-0".
"""

from __future__ import annotations


def margin_percent(pct: float, places: int = 0) -> str:
    """``89 %`` (``places`` decimals: ``89.2 %``); a value that rounds to 0 is ``0 %``."""
    rounded = round(pct, places)
    return f"{abs(rounded) if rounded == 0 else rounded:.{places}f} %"


def extra_cost_words(pct: float, places: int = 0) -> str:
    """``89 % more``: how much more the other costs, the winner's cost being 100 %."""
    return f"{margin_percent(pct, places)} more"


def margin_interval_words(ci95_pct, places: int = 0) -> str:
    """``95 % CI 89–90 %`` (or ``-1–7 %``); "" without an interval."""
    if not ci95_pct:
        return ""
    low, high = (margin_percent(bound, places).removesuffix(" %") for bound in ci95_pct)
    return f"95 % CI {low}–{high} %"


def margin_words(
    pct: float, *, tie: bool, other: str, plural: bool = False, places: int = 0
) -> str:
    """``OTHER costs 89 % more`` (``plural``: ``cost``, as in "vLLM's defaults cost …"), or
    for a tie ``tie, within noise, with OTHER: 3 % apart``."""
    if tie:
        return f"tie, within noise, with {other}: {margin_percent(pct, places)} apart"
    return f"{other} {'cost' if plural else 'costs'} {extra_cost_words(pct, places)}"
