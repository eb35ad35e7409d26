"""What an organization spent in a month, summed from its runs."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.db.models import Sum

from runs.costs import month_bounds_utc, round_usd
from runs.models import Organization, Run


def org_month_spend_usd(*, org: Organization, month: date) -> Decimal:
    """What the organization's runs started in ``month`` (its first day, UTC) cost, exactly.

    Each run's ``cost_usd`` counts whole in the month of its ``created_at`` (the month
    ``runs.costs.month_start`` names), never prorated; another organization's runs never
    count.
    """
    start, end = month_bounds_utc(month)
    total = Run.objects.filter(
        organization=org, created_at__gte=start, created_at__lt=end
    ).aggregate(total=Sum("cost_usd"))["total"]
    return round_usd(total if total is not None else Decimal(0))
