"""Pages for workload datasets: the organization's uploaded files (ShareGPT conversations or
request traces), upload, a preview of each, and delete.

As everywhere in the UI, rows are reached only through ``runs.access`` (another
organization's dataset is a 404, a viewer's upload a 403), the form is checked by the API's
own serializer and written by the service the API calls (``dataset_upload``), so a page and
``POST /api/v1/orgs/<org>/datasets/`` refuse the same file with the same message.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect, render
from django.template.defaultfilters import filesizeformat

from frontend.experiments.dataset_preview import trace_preview
from frontend.org_pages import org_context, org_page
from frontend.validation import error_summary, parse_as_api
from runs.access import Need, access_dataset, scoped
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.inputs.experiments import DatasetUploadSerializer
from runs.models import Experiment, WorkloadDataset
from runs.models.experiments import DATASET_FORMAT_CHOICES
from runs.services.experiments import dataset_delete, dataset_file_read, dataset_upload

SAMPLES = "examples/workloads"

_LABELS = {"name": "Name", "format": "Format", "file": "File"}


def _contents(dataset: WorkloadDataset) -> str:
    """What the file holds, counted: '12 usable conversations', '24 requests'."""
    if not dataset.is_trace:
        return f"{dataset.num_conversations} usable conversations"
    summary = dataset.summary if isinstance(dataset.summary, dict) else {}
    requests = summary.get("requests")
    return f"{requests} requests" if isinstance(requests, int) else "a trace without a summary"


def _users_of(membership, datasets) -> dict[str, list[Experiment]]:
    """The experiments whose workload names each dataset, by the dataset's id."""
    ids = [str(dataset.id) for dataset in datasets]
    users: dict[str, list[Experiment]] = {}
    experiments = scoped(membership, Experiment).filter(workload__dataset__dataset_id__in=ids)
    for experiment in experiments.order_by("name").only("id", "name", "workload"):
        users.setdefault(experiment.workload["dataset"]["dataset_id"], []).append(experiment)
    return users


@org_page("GET", "POST", post=Need.WRITE)
def datasets(request, membership):
    """The list, and the upload form (members and up); a refused upload stores nothing."""
    writing = request.method == "POST"
    errors: dict[str, list[str]] = {}
    if writing:
        try:
            data = parse_as_api(DatasetUploadSerializer, request.POST.dict() | request.FILES.dict())
            dataset = dataset_upload(
                org=membership.organization,
                actor=actor_from_request(request),
                name=data["name"],
                raw=dataset_file_read(data["file"]),
                dataset_format=data["format"],
            )
        except DomainValidationError as exc:
            errors = exc.fields
        else:
            messages.success(
                request,
                f"Uploaded {dataset.name}: {_contents(dataset)}, "
                f"{filesizeformat(dataset.size_bytes)}.",
            )
            if dataset.is_trace:
                return redirect("dataset-preview", membership.organization.slug, dataset.id)
            return redirect("datasets", membership.organization.slug)
    rows = list(scoped(membership, WorkloadDataset).select_related("created_by").order_by("name"))
    users = _users_of(membership, rows)
    context = org_context(
        membership,
        rows=[(dataset, users.get(str(dataset.id), []), _contents(dataset)) for dataset in rows],
        errors=errors,
        summary=error_summary(errors, _LABELS),
        values=request.POST if writing else {},
        max_bytes=settings.DATASET_MAX_BYTES,
        formats=DATASET_FORMAT_CHOICES,
        samples=_sample_files(),
    )
    return render(
        request, "frontend/experiments/datasets.html", context, status=400 if errors else 200
    )


def _sample_files() -> list[str]:
    """The sample workloads shipped in the repository (one per format), to try an upload
    with; none where the site runs without the repository's examples."""
    folder = settings.BASE_DIR / SAMPLES
    return sorted(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []


@org_page("POST", need=Need.WRITE)
def dataset_remove(request, membership, dataset_id):
    """Deletes a dataset no experiment uses; one in use stays, with the reason shown."""
    dataset = access_dataset(membership=membership, dataset_id=dataset_id)
    try:
        dataset_delete(dataset=dataset, actor=actor_from_request(request))
    except Conflict as exc:
        messages.error(request, f"{dataset.name}: {exc}")
    else:
        messages.success(request, f"Deleted {dataset.name}.")
    return redirect("datasets", membership.organization.slug)


@org_page("GET")
def dataset_detail(request, membership, dataset_id):
    """One dataset: what it is, who uses it, and a trace's preview (its stored summary: the
    lengths' histograms, arrivals over time, the shared-prefix share, counts)."""
    dataset = access_dataset(membership=membership, dataset_id=dataset_id)
    users = _users_of(membership, [dataset]).get(str(dataset.id), [])
    context = org_context(
        membership,
        dataset=dataset,
        format_label=dict(DATASET_FORMAT_CHOICES)[dataset.format],
        contents=_contents(dataset),
        users=users,
        preview=trace_preview(dataset.summary) if dataset.is_trace else None,
    )
    return render(request, "frontend/experiments/dataset_detail.html", context)
