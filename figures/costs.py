"""USD per 1M output tokens: the one sum behind every cost per token, the site's
(``runs.costs``, in ``Decimal``) and the CLI gate's (in floats).

Guarantee: one order of operations, rate ÷ 3600 ÷ throughput × 1e6, whatever the number
type: a ``Decimal`` stays a ``Decimal`` (its caller's context decides the precision), a float
a float. Callers decide what "no cost" is (no rate, no tokens); this only divides.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TypeVar

SECONDS_PER_HOUR = 3600
ONE_MILLION = 1_000_000

Number = TypeVar("Number", float, Decimal)


def usd_per_million_output_tokens(usd_per_hr: Number, output_tok_s: Number) -> Number:
    """What 1M output tokens cost at ``usd_per_hr`` while serving ``output_tok_s`` tokens/s:
    $/s ÷ tokens/s = $ per token, × 1e6. Unrounded (money rounds once, at its caller's
    end); ``output_tok_s`` must be positive."""
    return usd_per_hr / SECONDS_PER_HOUR / output_tok_s * ONE_MILLION
