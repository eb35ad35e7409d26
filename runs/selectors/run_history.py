"""Reads behind the run history: an organization's runs filtered on what each was started
with, and what a row of the page shows.

Guarantees:
- every read takes a membership, or runs already reached through ``runs.access``, and
  filters on their organization;
- a run is filtered and named by its frozen job (``runs.run_as_started``), never by its
  experiment as it is now;
- the number of queries of the page does not grow with the number of runs shown;
- a row's answer (``with_answers``) is its run's answer's (``runs.selectors.run_answer``):
  the winner is the trial cheapest at capacity, priced by the same rule at the run's pod rate
  (``runs.selectors.trial_costs``' rule), and its change from the experiment's previous run
  with a capacity search is worded by ``figures.deltas`` with its interval.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from django.db.models import (
    CharField,
    Count,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    prefetch_related_objects,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from figures.deltas import FigureDelta, figure_delta
from runs.access import scoped
from runs.models import Experiment, GpuType, Membership, Run, Trial
from runs.models.experiments import Engine
from runs.run_as_started import (
    GPU_TYPE_PATH,
    IMAGE_TAG_PATH,
    MODEL_PATH,
    SIMULATED_RUNS,
    run_cloud_type,
    run_engine,
    run_is_simulated,
)
from runs.selectors.prices import gpu_price, pod_rate_from_price
from runs.selectors.run_answer import capacity_cost_ci95, capacity_usd_per_million
from runs.selectors.trial_costs import run_gpu_share


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
    # Filtered on what each run was started with (runs.run_as_started), not its experiment now.
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
    """Sets ``simulated`` on each run, for a template (``runs.run_as_started.run_is_simulated``)."""
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


@dataclass(frozen=True)
class HistoryAnswer:
    """What a history row shows of its run's answer: the winner's capacity at the SLOs and
    its cost per 1M output tokens there, and how that cost moved from the experiment's
    previous run with an answer (``change``; None when there is none to compare)."""

    trial: int
    capacity: dict  # the winner's ``Trial.capacity``
    usd_per_million: Decimal
    usd_per_million_ci95: tuple[Decimal, Decimal] | None
    previous_run_id: uuid.UUID | None = None
    change: FigureDelta | None = None


def with_answers(runs: list[Run]) -> list[Run]:
    """Sets ``answer`` (a ``HistoryAnswer``, or None without one) on each run, and on those
    with one its change from the experiment's previous run that searched a capacity, in a
    number of queries that does not grow with the runs (see the module docstring)."""
    for run in runs:
        run.answer = None
    runs = list(runs)
    searched = _searched_trials(runs)
    if not searched:
        return runs
    answered = [run for run in runs if run.id in searched]
    # The previous run of the same experiment that searched a capacity, page or not.
    earlier = Run.objects.filter(
        organization_id=OuterRef("organization_id"),
        experiment_id=OuterRef("experiment_id"),
        created_at__lt=OuterRef("created_at"),
        trials__capacity__isnull=False,
    ).order_by("-created_at", "-id")
    org_id = answered[0].organization_id if answered else None
    previous_of = dict(
        Run.objects.filter(organization_id=org_id, id__in=[run.id for run in answered])
        .annotate(previous=Subquery(earlier.values("id")[:1]))
        .values_list("id", "previous")
    )
    on_page = {run.id: run for run in runs}
    wanted = {p for p in previous_of.values() if p is not None and p not in on_page}
    previous_runs = (
        list(Run.objects.filter(organization_id=org_id, id__in=wanted)) if wanted else []
    )
    searched |= _searched_trials(previous_runs)
    answers = _answers([*answered, *previous_runs], searched)
    for run in answered:
        answer = answers.get(run.id)
        previous_id = previous_of.get(run.id)
        base = answers.get(previous_id)
        if answer is not None and base is not None:
            answer = HistoryAnswer(
                **{**vars(answer), "previous_run_id": previous_id, "change": _change(answer, base)}
            )
        run.answer = answer
    return runs


def _searched_trials(runs: list[Run]) -> dict[uuid.UUID, list[Trial]]:
    """The trials of ``runs`` whose capacity search reported, per run, by index."""
    if not runs:
        return {}
    trials: dict[uuid.UUID, list[Trial]] = {}
    rows = Trial.objects.filter(
        organization_id__in={run.organization_id for run in runs},
        run__in=runs,
        capacity__isnull=False,
    ).order_by("run_id", "index")
    for trial in rows.only("id", "run_id", "index", "capacity", "serve_config", "organization_id"):
        trials.setdefault(trial.run_id, []).append(trial)
    return trials


def _answers(runs: list[Run], searched: dict) -> dict[uuid.UUID, HistoryAnswer]:
    rates = _pod_rates(runs)
    winners = {}
    shares = {}
    for run in runs:
        rate = rates[run.id]
        for trial in searched.get(run.id, []):
            shares[trial.id] = run_gpu_share(run, trial.serve_config)
        priced = [
            (cost, trial)
            for trial in searched.get(run.id, [])
            if (
                cost := capacity_usd_per_million(
                    trial.capacity, pod_usd_per_hr=rate, share=shares[trial.id]
                )
            )
            is not None
        ]
        if priced:
            # As run_answer: the cheapest at capacity, the lowest index among equals.
            winners[run.id] = min(priced, key=lambda pair: (pair[0], pair[1].index))
    # The winners' levels only: their intervals come from the levels at capacity.
    prefetch_related_objects([trial for _, trial in winners.values()], "measurements")
    return {
        run_id: HistoryAnswer(
            trial=trial.index,
            capacity=trial.capacity,
            usd_per_million=cost,
            usd_per_million_ci95=capacity_cost_ci95(
                trial, pod_usd_per_hr=rates[run_id], share=shares[trial.id]
            ),
        )
        for run_id, (cost, trial) in winners.items()
    }


def _pod_rates(runs: list[Run]) -> dict[uuid.UUID, Decimal | None]:
    """Each run's pod rate by ``runs.selectors.trial_costs``' rule: its billed rate, else the
    organization's price for the GPUs it was started with; each price read once."""
    rates, prices = {}, {}
    engines = {run.id: run_engine(run) for run in runs if run.price_usd_hr is None}
    gpu_types = GpuType.objects.in_bulk({e.gpu_type for e in engines.values()}) if engines else {}
    for run in runs:
        if run.price_usd_hr is not None:
            rates[run.id] = run.price_usd_hr
            continue
        engine = engines[run.id]
        key = (run.organization_id, engine.gpu_type, run_cloud_type(run))
        if key not in prices:
            gpu_type = gpu_types.get(engine.gpu_type)
            prices[key] = (
                None
                if gpu_type is None
                else gpu_price(org=run.organization, gpu_type=gpu_type, cloud_type=key[2])
            )
        price = prices[key]
        rates[run.id] = None if price is None else pod_rate_from_price(price, engine.gpu_count)[0]
    return rates


def _change(answer: HistoryAnswer, base: HistoryAnswer) -> FigureDelta:
    def floats(interval):
        return None if interval is None else (float(interval[0]), float(interval[1]))

    return figure_delta(
        new=float(answer.usd_per_million),
        base=float(base.usd_per_million),
        new_interval=floats(answer.usd_per_million_ci95),
        base_interval=floats(base.usd_per_million_ci95),
        higher_is_better=False,  # a cost: lower is better
    )
