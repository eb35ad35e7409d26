"""Reads behind the run history: an organization's runs filtered on what each was started
with, and what a row of the page shows.

Guarantees:
- every read takes a membership, or runs already reached through ``runs.access``, and
  filters on their organization;
- a run is filtered and named by its frozen job (``runs.frozen_job``), never by its
  experiment as it is now;
- the number of queries of the page does not grow with the number of runs shown.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

from django.db.models import CharField, Count, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from runs.access import scoped
from runs.frozen_job import (
    GPU_TYPE_PATH,
    IMAGE_TAG_PATH,
    MODEL_PATH,
    SIMULATED_RUNS,
    run_is_simulated,
)
from runs.models import Experiment, GpuType, Membership, Run, Trial
from runs.models.experiments import Engine


@dataclass
class HistoryFilters:
    """What the history page filters on (each optional)."""

    model: uuid.UUID | None = None
    gpu: str = ""
    engine: str = ""  # "sim", or a vLLM image tag such as "v0.11.0"
    state: str = ""
    created_from: date | None = None
    created_to: date | None = None  # inclusive


def runs_history(*, membership: Membership, filters: HistoryFilters) -> QuerySet[Run]:
    """The organization's runs matching ``filters``, newest first, with what a row shows."""
    runs = scoped(membership, Run)
    # Filtered on what each run was started with (runs.frozen_job), not its experiment now.
    if filters.model is not None:
        runs = runs.filter(**{MODEL_PATH: str(filters.model)})
    if filters.gpu:
        runs = runs.filter(
            Q(pod_gpu_type=filters.gpu) | Q(pod_gpu_type="", **{GPU_TYPE_PATH: filters.gpu})
        )
    if filters.engine == Engine.SIM:
        runs = runs.filter(SIMULATED_RUNS)
    elif filters.engine:
        runs = runs.filter(~SIMULATED_RUNS, **{IMAGE_TAG_PATH: filters.engine})
    if filters.state:
        runs = runs.filter(state=filters.state)
    if filters.created_from:
        runs = runs.filter(created_at__gte=_day_start(filters.created_from))
    if filters.created_to:
        runs = runs.filter(created_at__lt=_day_start(filters.created_to + timedelta(days=1)))
    return (
        with_gpu_name(runs)
        .select_related("experiment__model", "experiment__gpu_type", "started_by")
        .order_by("-created_at", "-id")
    )


def with_gpu_name(runs: QuerySet[Run]) -> QuerySet[Run]:
    """``runs`` with ``gpu_name``: the GPU type of the run's pod once one is recorded, else
    the display name of the type it was started with (its id when the catalogue no longer
    has it), in the same query as the runs."""
    frozen = KT(GPU_TYPE_PATH)
    display_name = GpuType.objects.filter(id=OuterRef("frozen_gpu_type")).values("display_name")
    return runs.annotate(frozen_gpu_type=frozen).annotate(
        gpu_name=Coalesce(
            NullIf("pod_gpu_type", Value("")),
            Subquery(display_name[:1]),
            frozen,
            output_field=CharField(),
        )
    )


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def with_simulated(runs: list[Run]) -> list[Run]:
    """Sets ``simulated`` on each run, for a template (``runs.frozen_job.run_is_simulated``)."""
    for run in runs:
        run.simulated = run_is_simulated(run)
    return runs


def with_trial_counts(runs: list[Run]) -> list[Run]:
    """Sets ``trial_count`` on each run (one query for the page, not one per row)."""
    counts = dict(
        Trial.objects.filter(
            organization_id__in={run.organization_id for run in runs}, run__in=runs
        )
        .values_list("run_id")
        .annotate(n=Count("id"))
        .values_list("run_id", "n")
    )
    for run in runs:
        run.trial_count = counts.get(run.id, 0)
    return runs


def engine_versions(*, membership: Membership) -> list[str]:
    """The engine choices the organization's experiments use: "sim" and image tags."""
    rows = scoped(membership, Experiment).values_list("engine", "engine_image_tag").distinct()
    versions = {Engine.SIM.value if engine == Engine.SIM else tag for engine, tag in rows}
    return sorted(v for v in versions if v)
