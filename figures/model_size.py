"""A model's size as text: the one way a parameter count is written, on the pages
(``{{ count|params }}``) and in ``benchsite models list``.

Guarantee: three significant digits at most, with the unit a model card uses (``1.1 B``,
``7.0 B``, ``70 B``, ``405 B``; ``125 M``; ``1.5 T``).
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

UNITS = ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K"))


def parameter_count_text(count) -> str:
    """``count`` parameters in the largest unit that keeps it at least 1: one decimal below
    10 (``7.0 B``, so sizes line up in a column), none from 10 on (``70 B``). A count below
    a thousand prints as it is; something that is not a number prints as given, and None as
    an empty string."""
    if count is None or count == "":
        return ""
    try:
        value = Decimal(str(count))
    except InvalidOperation:
        return str(count)
    for index, (scale, unit) in enumerate(UNITS):
        if abs(value) >= scale:
            scaled = value / scale
            places = Decimal("0.1") if abs(scaled) < 10 else Decimal("1")
            rounded = scaled.quantize(places, rounding=ROUND_HALF_EVEN)
            if abs(rounded) >= 10:  # 9.96 rounds to 10.0: written 10, like any size from 10
                rounded = rounded.quantize(Decimal("1"))
            # Rounding up may reach 1000 of this unit (999.6 M): that is 1.0 of the next.
            if abs(rounded) >= 1000 and index > 0:
                return f"{'-' if value < 0 else ''}1.0 {UNITS[index - 1][1]}"
            return f"{rounded} {unit}"
    return format(value, "f")
