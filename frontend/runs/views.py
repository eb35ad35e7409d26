"""The live run page, the run history and comparisons.

Like every page they reach tenant rows only through ``runs.access``: another organization's
run answers 404 exactly like a missing one, and a viewer may read but not cancel (403).
Reads are in ``runs.selectors`` (``run_pages``, ``run_history``, ``trial_compare``), the live
page's words in ``frontend.runs.live_state``; the one write (cancel) is ``runs.services``'.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.views.decorators.cache import never_cache

from frontend.org_pages import org_context, org_page
from frontend.runs.forms import HistoryFilterForm, RunCancelForm
from frontend.runs.live_state import run_live_state
from runs.access import Need, access_run
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.models import Role
from runs.selectors.run_history import (
    runs_history,
    with_answers,
    with_simulated,
    with_trial_counts,
)
from runs.selectors.run_search import run_search_state
from runs.selectors.schedules import run_firing
from runs.selectors.trial_compare import (
    MAX_COMPARED_TRIALS,
    CompareInputError,
    compare_trials,
    comparison_table,
    parse_selection,
)
from runs.services.run_control import run_cancel

HISTORY_PAGE_SIZE = 50
DEFAULT_THRESHOLD_PCT = 5.0


@org_page()
def runs_list(request, membership):
    """The organization's runs, filtered on the server and paginated, each with its answer
    (capacity and cost there) and that cost's change from the experiment's previous answer;
    pick two or more to compare."""
    form = HistoryFilterForm(request.GET or None, membership=membership)
    if form.is_bound:
        form.is_valid()  # errors are shown beside their fields; valid ones still filter
    runs = runs_history(membership=membership, filters=form.filters())
    page = Paginator(runs, HISTORY_PAGE_SIZE).get_page(request.GET.get("page"))
    with_answers(with_simulated(with_trial_counts(page.object_list)))
    query = request.GET.copy()
    query.pop("page", None)
    context = org_context(membership, form=form, page=page, query=query.urlencode())
    return render(request, "frontend/runs/history.html", context)


@org_page()
def run_detail(request, membership, run_id):
    """The live run page; without JavaScript its tables still show every result."""
    run = access_run(membership=membership, run_id=run_id)
    state = run_live_state(run=run)
    context = org_context(
        membership,
        run=run,
        experiment=run.experiment,
        state=state,
        can_cancel=Role(membership.role).can_write and not state["run"]["terminal"],
        search=run_search_state(run=run),
        firing=run_firing(run),
        cancel_form=RunCancelForm(),
        live_url=reverse("run-live", args=[membership.organization.slug, run.id]),
        socket_path=f"/ws/runs/{run.id}/",
    )
    return render(request, "frontend/runs/detail.html", context)


@never_cache
@org_page()
def run_live(request, membership, run_id):
    """The run's state as JSON: what the live page re-reads after every (re)connect."""
    run = access_run(membership=membership, run_id=run_id)
    state = run_live_state(run=run)
    # The trial cards, the answer and the search come rendered by the page's own templates,
    # so the live page and the page without JavaScript show them alike.
    state["trials_html"] = render_to_string(
        "frontend/runs/_trials.html",
        org_context(
            membership, trials=state["trials"], run=run, simulated=state["run"]["simulated"]
        ),
        request=request,
    )
    state["answer_html"] = render_to_string(
        "frontend/runs/_answer.html",
        org_context(membership, answer=state["answer"], terminal=state["run"]["terminal"]),
        request=request,
    )
    state["search_html"] = render_to_string(
        "frontend/runs/_search.html",
        org_context(
            membership, search=run_search_state(run=run), simulated=state["run"]["simulated"]
        ),
        request=request,
    )
    return JsonResponse(state)


@org_page("POST", need=Need.WRITE)
def run_cancel_view(request, membership, run_id):
    """Asks the run to stop (members and above); the page shows the request at once and
    the run's end when its agent has stopped."""
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
    return redirect("run-detail", org=membership.organization.slug, run_id=run.id)


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


@org_page()
def runs_compare(request, membership):
    """Two or more runs or trials side by side: setup and serve-flag diff, metrics per level
    with regressions and improvements marked, cost per 1M output tokens."""
    threshold, threshold_error = _threshold(request.GET.get("threshold"))
    context = org_context(
        membership,
        threshold=threshold,
        threshold_error=threshold_error,
        max_trials=MAX_COMPARED_TRIALS,
        selected_runs=request.GET.getlist("runs"),
        selected_trials=request.GET.getlist("trials"),
    )
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
