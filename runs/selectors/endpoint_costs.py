"""What an existing endpoint's run cost in tokens, at the price per token it was started with.

Guarantee: ``run_endpoint_token_cost`` is the measured levels' input and output tokens (the
server's own ``usage`` counts, summed over every stored level of the run) at the endpoint's
frozen price per 1M tokens; 0 for a run priced per hour, unpriced, or of another engine (its
cost is its billed time, or unknown: ``runs.run_as_started.run_cost_is_known``). Warm-up requests
are not measured, so they are not in it.
"""

from __future__ import annotations

from decimal import Decimal

from django.db.models import IntegerField, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from agents.protocol import LEVEL_RESULT_KEY as KEY
from runs.costs import token_cost_usd
from runs.models import Measurement, Run
from runs.run_as_started import run_endpoint_price


def run_endpoint_token_cost(run: Run) -> Decimal:
    """The run's tokens at its endpoint's price per token (see the module docstring)."""
    price = run_endpoint_price(run)
    if price is None or not price.per_token:
        return Decimal(0)
    totals = Measurement.objects.filter(
        organization_id=run.organization_id, trial__run=run
    ).aggregate(
        input=Sum(Cast(KeyTextTransform(KEY.total_input_tokens, "result"), IntegerField())),
        output=Sum(Cast(KeyTextTransform(KEY.total_output_tokens, "result"), IntegerField())),
    )
    return token_cost_usd(
        input_tokens=totals["input"] or 0,
        output_tokens=totals["output"] or 0,
        usd_per_1m_input_tokens=price.usd_per_1m_input_tokens,
        usd_per_1m_output_tokens=price.usd_per_1m_output_tokens,
    )
