"""The job an agent runs, for one provisioning attempt: the run's frozen job
(``runs.run_as_started``) with this attempt's deadline, report URLs and GPU type.

Guarantees: the job's deadline never lets a run outspend the budget cap it was started with
at the GPU's price, or an existing endpoint's price per hour (less what its earlier pods cost,
for a resumed run), and never exceeds
twice the estimate it was started with (plus ten minutes of slack) — the agent enforces it on
its own, so a lost site cannot keep a GPU busy. A pod's job holds only the trials that have not
ended, on the first image that has any left (``runs.run_as_started.job_spec_for_attempt``).
"""

from __future__ import annotations

import datetime
from decimal import Decimal

from django.utils import timezone

from agents import protocol
from runs.models import GpuType, Run, Trial
from runs.models.runs import UNFINISHED_OUTCOMES
from runs.placement import Placement
from runs.run_as_started import (
    job_spec_for_attempt,
    run_budget_cap,
    run_cloud_type,
    run_endpoint_price,
    run_engine,
    run_estimate_seconds,
    run_is_simulated,
    run_next_image_tag,
    run_planned_trials,
)
from runs.selectors.prices import gpu_price

DEADLINE_SLACK = datetime.timedelta(minutes=10)
ESTIMATE_FACTOR = 2


def run_deadline(
    run: Run, *, placement: Placement | None = None, now: datetime.datetime | None = None
) -> datetime.datetime:
    """When the agent must stop, whatever happens (see the module docstring); priced at
    ``placement`` (where the pod goes) when given, else at the run's own GPU."""
    now = now or timezone.now()
    estimate_seconds = run_estimate_seconds(run)
    deadline = now + datetime.timedelta(seconds=estimate_seconds * ESTIMATE_FACTOR)
    deadline += DEADLINE_SLACK
    engine = run_engine(run)
    if engine.kind == "endpoint":
        # Nothing rented: the time box alone, and the cap at the endpoint's price per hour.
        endpoint_price = run_endpoint_price(run)
        hourly = endpoint_price.usd_per_hour if endpoint_price else None
        if hourly:
            left = run_budget_cap(run) - Decimal(run.earlier_pods_cost_usd)
            affordable = float(max(left, Decimal(0)) / (hourly / Decimal(3600)))
            deadline = min(deadline, now + datetime.timedelta(seconds=affordable))
    elif not run_is_simulated(run):
        gpu_id, cloud = engine.gpu_type, run_cloud_type(run)
        if placement is not None:
            gpu_id, cloud = placement.gpu_type_id, placement.cloud_type
        gpu = GpuType.objects.get(id=gpu_id)
        price = gpu_price(org=run.organization, gpu_type=gpu, cloud_type=cloud).usd_per_gpu_hour
        if price:
            per_second = price * engine.gpu_count / Decimal(3600)
            left = run_budget_cap(run) - Decimal(run.earlier_pods_cost_usd)
            affordable = float(max(left, Decimal(0)) / per_second)
            deadline = min(deadline, now + datetime.timedelta(seconds=affordable))
    return deadline


def run_job_spec(
    run: Run, *, ws_url: str | None, rest_url: str | None, placement: Placement | None = None
) -> protocol.JobSpec:
    """The whole job of ``run`` as it was started; ``placement`` is where its pod goes
    (default: the run's own GPU type)."""
    return job_spec_for_attempt(
        run,
        deadline=run_deadline(run, placement=placement),
        report=protocol.ReportTo(ws_url=ws_url, rest_url=rest_url),
        gpu_type=placement.gpu_type_id if placement else None,
        skip_trials=_ended_trials(run),
    )


def run_pod_image_tag(run: Run) -> str | None:
    """The image the run's next pod runs: that of its first trial not yet ended."""
    return run_next_image_tag(run, skip_trials=_ended_trials(run))


def run_images_left(run: Run) -> list[str | None]:
    """The images of the run's trials not yet ended, in trial order, each once."""
    ended = _ended_trials(run)
    images = [
        trial.image_tag for index, trial in enumerate(run_planned_trials(run)) if index not in ended
    ]
    return list(dict.fromkeys(images))


def _ended_trials(run: Run) -> set[int]:
    ended = Trial.objects.filter(organization_id=run.organization_id, run=run).exclude(
        outcome__in=UNFINISHED_OUTCOMES
    )
    return set(ended.values_list("index", flat=True))
