"""Pages for evaluation sets (issue 38, docs/quality.md): the organization's uploaded JSONL
sets with their summary, upload, and delete.

As everywhere in the UI, rows are reached only through ``runs.access`` (another
organization's set is a 404, a viewer's upload a 403); the form is checked by the API's own
serializer and written by the service the API calls (``evaluation_set_upload``, audited as
``evaluation_set.upload``), so a page and ``POST /api/v1/orgs/<org>/evaluation-sets/``
refuse the same file with the same message (the line and the item's field) and store
nothing then.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.template.defaultfilters import filesizeformat

from frontend.org_pages import org_context, org_page
from frontend.validation import error_summary, parse_as_api
from runs.access import Need, access_evaluation_set, scoped
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.experiment_evaluation import builtin_packs
from runs.inputs.evaluations import EvaluationSetUploadSerializer
from runs.models import EvaluationSet, Experiment
from runs.services.evaluations import evaluation_set_delete, evaluation_set_upload
from runs.services.experiments import dataset_file_read

_LABELS = {"name": "Name", "description": "Description", "file": "File"}


def items_text(count: int) -> str:
    """'1 item', '80 items'."""
    return f"{count} item{'' if count == 1 else 's'}"


def scorers_text(summary: dict) -> str:
    """The set's scorers, counted: 'numeric 80', 'exact 9, judge 2'."""
    scorers = summary.get("scorers") if isinstance(summary, dict) else None
    if not isinstance(scorers, dict) or not scorers:
        return "–"
    return ", ".join(f"{kind} {count}" for kind, count in sorted(scorers.items()))


def _users_of(membership, evaluation_sets) -> dict[str, list[Experiment]]:
    """The experiments whose evaluation names each set, by the set's id."""
    ids = [str(evaluation_set.id) for evaluation_set in evaluation_sets]
    users: dict[str, list[Experiment]] = {}
    experiments = scoped(membership, Experiment).filter(evaluation__set_id__in=ids)
    for experiment in experiments.order_by("name").only("id", "name", "evaluation"):
        users.setdefault(experiment.evaluation["set_id"], []).append(experiment)
    return users


@org_page("GET", "POST", post=Need.WRITE)
def evaluation_sets(request, membership):
    """The list with each set's summary, and the upload form (members and up); a refused
    upload stores nothing and shows the error under the file."""
    writing = request.method == "POST"
    errors: dict[str, list[str]] = {}
    if writing:
        try:
            data = parse_as_api(
                EvaluationSetUploadSerializer, request.POST.dict() | request.FILES.dict()
            )
            uploaded = evaluation_set_upload(
                org=membership.organization,
                actor=actor_from_request(request),
                name=data["name"],
                description=data["description"],
                raw=dataset_file_read(data["file"]),
            )
        except DomainValidationError as exc:
            errors = exc.fields
        else:
            messages.success(
                request,
                f"Uploaded {uploaded.name}: {items_text(uploaded.items)}, "
                f"{filesizeformat(uploaded.size_bytes)}.",
            )
            return redirect("evaluation-sets", membership.organization.slug)
    rows = list(scoped(membership, EvaluationSet).select_related("created_by").order_by("name"))
    users = _users_of(membership, rows)
    context = org_context(
        membership,
        rows=[(row, users.get(str(row.id), []), scorers_text(row.summary)) for row in rows],
        packs=[(pack, scorers_text(pack.summary)) for pack in builtin_packs()],
        errors=errors,
        summary=error_summary(errors, _LABELS),
        values=request.POST if writing else {},
        max_bytes=settings.DATASET_MAX_BYTES,
    )
    return render(
        request,
        "frontend/experiments/evaluation_sets.html",
        context,
        status=400 if errors else 200,
    )


@org_page("POST", need=Need.WRITE)
def evaluation_set_remove(request, membership, evaluation_set_id):
    """Deletes a set no experiment names and no run under way carries; one in use stays,
    with the reason shown."""
    evaluation_set = access_evaluation_set(
        membership=membership, evaluation_set_id=evaluation_set_id
    )
    try:
        evaluation_set_delete(evaluation_set=evaluation_set, actor=actor_from_request(request))
    except Conflict as exc:
        messages.error(request, f"{evaluation_set.name}: {exc}")
    else:
        messages.success(request, f"Deleted {evaluation_set.name}.")
    return redirect("evaluation-sets", membership.organization.slug)
