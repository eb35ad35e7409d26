"""The answer's margin as every page writes it: ``{% load margins %}`` then
``{{ answer.margin_pct|extra_cost:1 }}`` (``89.2 % more``), ``{{ pct|margin_percent:1 }}``
and ``{{ answer.margin_ci95_pct|margin_interval:1 }}`` (``95 % CI 88.6–90.1 %``).

The words are ``figures.margins``', the demo's and the CLI's too; the argument is how many
decimals a page shows.
"""

from __future__ import annotations

from django import template

from figures import margins

register = template.Library()


@register.filter
def extra_cost(pct, places=1) -> str:
    """``89.2 % more``: how much more the other configuration costs than the winner."""
    return "" if pct is None else margins.extra_cost_words(float(pct), int(places))


@register.filter
def margin_percent(pct, places=1) -> str:
    """``3.0 %``: how far apart two costs are (a tie's difference)."""
    return "" if pct is None else margins.margin_percent(float(pct), int(places))


@register.filter
def margin_interval(ci95_pct, places=1) -> str:
    """``95 % CI 88.6–90.1 %``; "" without an interval."""
    if not ci95_pct:
        return ""
    return margins.margin_interval_words([float(bound) for bound in ci95_pct], int(places))
