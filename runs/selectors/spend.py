"""What an organization spent, summed from its runs' ``cost_usd``: in a month, per month and
per experiment beside the budgets that cap them. Another organization's runs never count."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date
from decimal import ROUND_HALF_EVEN, Decimal

from django.db.models import Count, Sum
from django.db.models.functions import TruncMonth

from runs.costs import month_bounds_utc, round_usd
from runs.models import Budget, Experiment, Organization, Run
from runs.selectors.trial_figures import TENTH


def budget_capping_month(budgets: Iterable[Budget], month: date) -> Budget | None:
    """Which of ``budgets`` caps the organization's spend in ``month`` (its first day): that
    month's own budget when there is one, else the standing monthly one, else none. An
    experiment's budget never caps a month. The one rule for the run start's check, the
    budgets page and the spend report."""
    monthly = {b.month: b for b in budgets if b.experiment_id is None}
    return monthly.get(month) or monthly.get(None)


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


class _SpendAgainstBudget:
    """What is left of a budget and how much of it is used (``spend_usd``, ``budget_usd``)."""

    spend_usd: Decimal
    budget_usd: Decimal | None

    @property
    def remaining_usd(self) -> Decimal | None:
        return None if self.budget_usd is None else round_usd(self.budget_usd - self.spend_usd)

    @property
    def used_pct(self) -> Decimal | None:
        if not self.budget_usd:
            return None
        return (self.spend_usd / self.budget_usd * 100).quantize(TENTH, rounding=ROUND_HALF_EVEN)


@dataclass(frozen=True)
class MonthSpend(_SpendAgainstBudget):
    month: date
    runs: int
    spend_usd: Decimal
    budget_usd: Decimal | None
    budget_scope: str  # "month", "standing" or ""


def spend_by_month(*, org: Organization) -> list[MonthSpend]:
    """The organization's spend per UTC month (runs counted whole in the month they were
    started, as ``org_month_spend_usd``), newest first, beside that month's
    budget (its own, else the standing one). Months with a budget but no run are listed too."""
    totals = {
        row["month"].date() if hasattr(row["month"], "date") else row["month"]: row
        for row in Run.objects.filter(organization=org)
        .annotate(month=TruncMonth("created_at", tzinfo=UTC))
        .values("month")
        .annotate(total=Sum("cost_usd"), runs=Count("id"))
        .order_by()
    }
    budgets = list(Budget.objects.filter(organization=org, experiment__isnull=True))
    by_month = {b.month: b for b in budgets if b.month is not None}
    months = sorted(set(totals) | set(by_month), reverse=True)
    rows = []
    for month in months:
        budget = budget_capping_month(budgets, month)
        row = totals.get(month)
        rows.append(
            MonthSpend(
                month=month,
                runs=row["runs"] if row else 0,
                spend_usd=round_usd(row["total"] if row else Decimal(0)),
                budget_usd=None if budget is None else budget.limit_usd,
                budget_scope="" if budget is None else budget.scope,
            )
        )
    return rows


@dataclass(frozen=True)
class ExperimentSpend(_SpendAgainstBudget):
    experiment: Experiment
    runs: int
    spend_usd: Decimal
    budget_usd: Decimal | None


def spend_by_experiment(*, org: Organization) -> list[ExperimentSpend]:
    """What each experiment's runs cost in total, beside the experiment's budget (a
    ``Budget`` on the experiment), dearest first; experiments without runs are left out."""
    totals = (
        Run.objects.filter(organization=org)
        .values("experiment_id")
        .annotate(total=Sum("cost_usd"), runs=Count("id"))
        .order_by()
    )
    totals = {row["experiment_id"]: row for row in totals}
    experiments = Experiment.objects.filter(organization=org, id__in=list(totals)).select_related(
        "model"
    )
    budgets = {
        b.experiment_id: b.limit_usd
        for b in Budget.objects.filter(organization=org, experiment__isnull=False)
    }
    rows = [
        ExperimentSpend(
            experiment=experiment,
            runs=totals[experiment.id]["runs"],
            spend_usd=round_usd(totals[experiment.id]["total"] or Decimal(0)),
            budget_usd=budgets.get(experiment.id),
        )
        for experiment in experiments
    ]
    return sorted(rows, key=lambda row: (-row.spend_usd, row.experiment.name))
