"""What a run cost, as every page writes it: ``{% load costs %}`` then ``{{ run|run_cost }}``."""

from __future__ import annotations

from django import template
from django.template.defaultfilters import floatformat

from runs.run_as_started import run_cost_is_known

register = template.Library()


@register.filter
def run_cost(run) -> str:
    """``$12.34``, or ``unknown`` for a run of an existing endpoint without a price: its
    stored cost is zero only because nothing was priced, and a page must not say $0.00."""
    if not run_cost_is_known(run):
        return "unknown"
    return f"${floatformat(run.cost_usd, 2)}"
