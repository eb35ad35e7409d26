"""The job an agent runs: built from a run's experiment, in the shared ``JobSpec`` shape.

Guarantee: the job's deadline never lets a run outspend its experiment's budget cap at the
GPU's price, and never exceeds twice the estimated duration (plus ten minutes of slack) —
the agent enforces it on its own, so a lost site cannot keep a GPU busy.
"""

from __future__ import annotations

import datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from agents import protocol
from runs.estimates import experiment_estimate
from runs.experiment_spec import vllm_version_of_tag
from runs.models import GpuType, Run
from runs.placement import Placement
from runs.selectors import gpu_price

DEADLINE_SLACK = datetime.timedelta(minutes=10)
ESTIMATE_FACTOR = 2


def run_deadline(
    run: Run, *, placement: Placement | None = None, now: datetime.datetime | None = None
) -> datetime.datetime:
    """When the agent must stop, whatever happens (see the module docstring); priced at
    ``placement`` (where the pod goes) when given, else at the experiment's own GPU."""
    now = now or timezone.now()
    experiment = run.experiment
    estimate = experiment_estimate(experiment=experiment)
    deadline = now + datetime.timedelta(seconds=estimate.total_seconds * ESTIMATE_FACTOR)
    deadline += DEADLINE_SLACK
    if experiment.engine == "vllm":
        gpu, cloud = experiment.gpu_type, experiment.cloud_type
        if placement is not None:
            gpu = GpuType.objects.get(id=placement.gpu_type_id)
            cloud = placement.cloud_type
        price = gpu_price(org=run.organization, gpu_type=gpu, cloud_type=cloud).usd_per_gpu_hour
        if price:
            per_second = price * experiment.gpu_count / Decimal(3600)
            affordable = float(experiment.budget_cap_usd / per_second)
            deadline = min(deadline, now + datetime.timedelta(seconds=affordable))
    return deadline


def run_job_spec(
    run: Run, *, ws_url: str | None, rest_url: str | None, placement: Placement | None = None
) -> protocol.JobSpec:
    """The whole job of ``run``; trials in the grid's deterministic order. ``placement`` is
    where its pod goes (default: the experiment's own GPU type)."""
    experiment, model = run.experiment, run.experiment.model
    configs = protocol.expand_serve_grid(experiment.serve_grid)
    return protocol.JobSpec(
        run_id=run.id,
        trials=[
            protocol.TrialSpec(index=index, serve_config=config)
            for index, config in enumerate(configs)
        ],
        workload=protocol.Workload.model_validate(experiment.workload),
        slos=protocol.Slos.model_validate(experiment.slos),
        engine=protocol.EngineSpec(
            kind=experiment.engine,
            image_tag=experiment.engine_image_tag or None,
            vllm_version=vllm_version_of_tag(experiment.engine_image_tag),
            gpu_type=placement.gpu_type_id if placement else experiment.gpu_type_id,
            gpu_count=experiment.gpu_count,
            # How much faster than the modelled GPU the simulator runs (its figures are
            # reported in the GPU's time whatever this is); no effect on real vLLM.
            sim_speed=float(getattr(settings, "BENCHSITE_SIM_SPEED", 1.0)),
        ),
        model=protocol.ModelSource(
            hf_repo=model.hf_repo,
            revision=model.revision,
            served_model_name=model.hf_repo,
            parameter_count=model.parameter_count,
            num_layers=model.num_layers,
            hidden_size=model.hidden_size,
            num_attention_heads=model.num_attention_heads,
            num_kv_heads=model.num_kv_heads,
            head_dim=model.head_dim,
            dtype=model.dtype,
            max_context=model.max_context,
        ),
        deadline=run_deadline(run, placement=placement),
        report=protocol.ReportTo(ws_url=ws_url, rest_url=rest_url),
    )
