"""Pages. Like the API, they reach tenant rows only through ``runs.access``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from frontend.org_pages import org_context, org_page
from runs.access import Principal, principal_memberships, scoped
from runs.models import Experiment, ModelSpec
from runs.selectors.run_history import (
    HistoryFilters,
    runs_history,
    with_answers,
    with_simulated,
)
from runs.selectors.spend import spend_by_month

# The newest runs the overview lists, each with its answer; the runs page has them all.
OVERVIEW_RUNS = 5


@login_required
def home(request):
    memberships = principal_memberships(Principal(user=request.user))
    return render(request, "frontend/home.html", {"memberships": memberships})


@org_page()
def org_overview(request, membership):
    """What a newcomer looks at first: the newest runs with their answers, this month's spend
    against the budget, then the experiments (each a link) and the models."""
    runs = runs_history(membership=membership, filters=HistoryFilters())[:OVERVIEW_RUNS]
    this_month = timezone.now().date().replace(day=1)
    month = next(
        (m for m in spend_by_month(org=membership.organization) if m.month == this_month), None
    )
    context = org_context(
        membership,
        runs=with_answers(with_simulated(list(runs))),
        month=month,
        this_month=this_month,
        models=scoped(membership, ModelSpec).order_by("name")[:100],
        experiments=scoped(membership, Experiment).select_related("model", "gpu_type")[:100],
    )
    return render(request, "frontend/org_overview.html", context)
