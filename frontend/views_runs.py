"""The live run page, the run history and comparisons.

Like every page they reach tenant rows only through ``runs.access``: another organization's
run answers 404 exactly like a missing one, and a viewer may read but not cancel (403).
Reads are in ``frontend.selectors_runs``; the one write (cancel) is ``runs.services``'.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST

from frontend.forms_runs import HistoryFilterForm, RunCancelForm
from frontend.selectors_runs import (
    MAX_COMPARED_TRIALS,
    METRICS,
    CompareInputError,
    compare_trials,
    comparison_table,
    parse_selection,
    run_live_state,
    runs_history,
    with_simulated,
    with_trial_counts,
)
from runs.access import Need, Principal, access_membership, access_run
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.models import Role
from runs.services.run_control import run_cancel

HISTORY_PAGE_SIZE = 50
DEFAULT_THRESHOLD_PCT = 5.0


def _membership(request, org: str, need: Need = Need.READ):
    return access_membership(principal=Principal(user=request.user), org_slug=org, need=need)


@login_required
@require_GET
def runs_list(request, org: str):
    """The organization's runs, filtered on the server and paginated; pick two or more to
    compare."""
    membership = _membership(request, org)
    form = HistoryFilterForm(request.GET or None, membership=membership)
    if form.is_bound:
        form.is_valid()  # errors are shown beside their fields; valid ones still filter
    runs = runs_history(membership=membership, filters=form.filters())
    page = Paginator(runs, HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    with_simulated(with_trial_counts(page.object_list))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "membership": membership,
        "org": membership.organization,
        "form": form,
        "page": page,
        "query": query.urlencode(),
    }
    return render(request, "frontend/runs/history.html", context)


@login_required
@require_GET
def run_detail(request, org: str, run_id):
    """The live run page; without JavaScript its tables still show every result."""
    membership = _membership(request, org)
    run = access_run(membership=membership, run_id=run_id)
    state = run_live_state(run=run)
    context = {
        "membership": membership,
        "org": membership.organization,
        "run": run,
        "experiment": run.experiment,
        "state": state,
        "metrics": METRICS,
        "can_cancel": Role(membership.role).can_write and not state["run"]["terminal"],
        "can_write": Role(membership.role).can_write,
        "cancel_form": RunCancelForm(),
        "live_url": reverse("run-live", args=[org, run.id]),
        "socket_path": f"/ws/runs/{run.id}/",
    }
    return render(request, "frontend/runs/detail.html", context)


@never_cache
@login_required
@require_GET
def run_live(request, org: str, run_id):
    """The run's state as JSON: what the live page re-reads after every (re)connect."""
    membership = _membership(request, org)
    run = access_run(membership=membership, run_id=run_id)
    state = run_live_state(run=run)
    # The trial cards come rendered by the page's own template, so the live page and the
    # page without JavaScript show them alike.
    state["trials_html"] = render_to_string(
        "frontend/runs/_trials.html",
        {
            "trials": state["trials"],
            "run": run,
            "org": membership.organization,
            "can_write": Role(membership.role).can_write,
            "simulated": state["run"]["simulated"],
        },
        request=request,
    )
    return JsonResponse(state)


@login_required
@require_POST
def run_cancel_view(request, org: str, run_id):
    """Asks the run to stop (members and above); the page shows the request at once and
    the run's end when its agent has stopped."""
    membership = _membership(request, org, Need.WRITE)
    run = access_run(membership=membership, run_id=run_id)
    form = RunCancelForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"Not cancelled: {form.errors['reason'][0]}")
    else:
        try:
            run_cancel(
                actor=actor_from_request(request), run=run, reason=form.cleaned_data["reason"]
            )
        except (Conflict, DomainValidationError) as refused:
            messages.error(request, f"Not cancelled: {refused}")
        else:
            messages.success(request, "Cancel requested: the run stops when its agent has.")
    return redirect("run-detail", org=org, run_id=run.id)


def _threshold(raw: str | None) -> tuple[float, str | None]:
    if raw in (None, ""):
        return DEFAULT_THRESHOLD_PCT, None
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100:
        return DEFAULT_THRESHOLD_PCT, (
            f"threshold: {raw[:20]!r} is not a percentage from 0 to 100; "
            f"{DEFAULT_THRESHOLD_PCT:g}% is used."
        )
    return value, None


@login_required
@require_GET
def runs_compare(request, org: str):
    """Two or more runs or trials side by side: setup and serve-flag diff, metrics per level
    with regressions and improvements marked, cost per 1M output tokens."""
    membership = _membership(request, org)
    threshold, threshold_error = _threshold(request.GET.get("threshold"))
    context = {
        "membership": membership,
        "org": membership.organization,
        "threshold": threshold,
        "threshold_error": threshold_error,
        "max_trials": MAX_COMPARED_TRIALS,
        "selected_runs": request.GET.getlist("runs"),
        "selected_trials": request.GET.getlist("trials"),
    }
    try:
        selection = parse_selection(request.GET.getlist("runs"), request.GET.getlist("trials"))
        compared = compare_trials(membership=membership, selection=selection)
    except CompareInputError as bad:
        context["error"] = str(bad)
        return render(request, "frontend/runs/compare.html", context, status=400)
    except LookupError:
        raise Http404 from None  # same answer for missing and not yours
    context["table"] = comparison_table(compared, threshold_pct=threshold)
    context["selection"] = selection
    return render(request, "frontend/runs/compare.html", context)
