"""Which budget caps a month is one rule (runs.selectors.spend.budget_capping_month), used by
the run start's check, the budgets page and the spend report."""

from __future__ import annotations

import datetime
from decimal import Decimal

from django.utils import timezone

from runs.costs import month_start
from runs.models import Budget
from runs.selectors.spend import budget_capping_month, spend_by_month
from runs.services.budgets import budget_set

from .conftest import SYSTEM, make_experiment, signed_in

JULY = datetime.date(2025, 7, 1)
AUGUST = datetime.date(2025, 8, 1)


def test_it_takes_the_months_own_budget_else_the_standing_one_never_an_experiments():
    standing = Budget(month=None, limit_usd=Decimal(100))
    july = Budget(month=JULY, limit_usd=Decimal(10))
    experiment = Budget(month=None, experiment_id="e", limit_usd=Decimal(1))
    budgets = [experiment, standing, july]
    assert budget_capping_month(budgets, JULY) is july
    assert budget_capping_month(budgets, AUGUST) is standing
    assert budget_capping_month([experiment, july], AUGUST) is None


def test_it_shows_the_same_cap_on_the_budgets_page_and_in_the_spend_report(alice):
    this_month = month_start(timezone.now())
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(100))
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal("12.34"), month=this_month)
    experiment = make_experiment(alice.org)
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal(1), experiment=experiment)
    report = {row.month: row.budget_usd for row in spend_by_month(org=alice.org)}
    assert report[this_month] == Decimal("12.34")
    page = signed_in(alice).get("/o/acme/settings/budgets/")
    assert page.status_code == 200
    assert page.context["cap"].limit_usd == Decimal("12.34")
