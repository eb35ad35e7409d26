"""What a run was started with: its frozen job (``Run.job_spec``) and, beside it, the
experiment's facts that are not the agent's (``Run.experiment_snapshot``). Together they are
the one truth of what a run does; nothing reads the live experiment to decide it.

Guarantees:
- ``job_spec_freeze`` builds and validates the whole ``protocol.JobSpec`` of an experiment,
  less the parts each provisioning attempt fills in (``PER_ATTEMPT``: the run's id, which is
  its row's, the deadline and where to report). The engine's GPU type is the experiment's
  own; a placement may replace it for one attempt. The evaluation is frozen in it: an
  uploaded set by id and digest, so the run scores exactly that file
  (``runs.evaluation_job``). A job the protocol refuses raises
  ``DomainValidationError`` naming the field, and nothing is written.
- ``job_spec_for_attempt`` gives back exactly the frozen job, with only the per-attempt
  parts added and the trials this pod runs: the first image's with trials left (a run over
  several image tags has one pod per tag, in order; its engine names that tag).
- The readers below (and the ``*_PATH`` names for queries) are the only code that knows
  the stored shapes; ``run_is_simulated`` applies the one rule for "simulated"
  (``runs.models.experiments.engine_is_simulated``) to the frozen engine.
"""

from __future__ import annotations

import datetime
import json
import secrets
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import pydantic
from django.conf import settings
from django.db.models import Q
from django.db.models.fields.json import KeyTextTransform, KeyTransform

from agents import protocol
from runs.errors import DomainValidationError
from runs.evaluation_job import job_evaluation
from runs.experiment_search import job_search
from runs.experiment_spec import (
    PlannedTrial,
    experiment_image_tags,
    experiment_trial_plan,
    vllm_version_of_tag,
)
from runs.models import Experiment, Run
from runs.models.experiments import Engine, engine_is_simulated
from runs.placement import Placement, placements

if TYPE_CHECKING:  # the estimate is the caller's; its module reads prices through selectors
    from runs.selectors.estimates import CostEstimate

PER_ATTEMPT = frozenset({"run_id", "deadline", "report"})
# Paths of frozen facts for queries over many runs (``KT(f"run__{ENGINE_KIND_PATH}")``).
ENGINE_KIND_PATH = "job_spec__engine__kind"
IMAGE_TAG_PATH = "job_spec__engine__image_tag"
GPU_TYPE_PATH = "job_spec__engine__gpu_type"
GPU_COUNT_PATH = "job_spec__engine__gpu_count"
SLOS_PATH = "job_spec__slos"
CLOUD_TYPE_PATH = "experiment_snapshot__cloud_type"
BUDGET_CAP_PATH = "experiment_snapshot__budget_cap_usd"
MODEL_PATH = "experiment_snapshot__model"
# What a run's evaluation was (the set's file itself is left out: up to 64 KiB a run).
EVALUATION_PACK_PATH = "job_spec__evaluation__pack"
EVALUATION_SET_ID_PATH = "job_spec__evaluation__set_id"
EVALUATION_SET_SHA256_PATH = "job_spec__evaluation__set_sha256"
QUALITY_FLOOR_PATH = "experiment_snapshot__quality_floor"
# The runs whose job has an evaluation (the job leaves the key out when it has none).
EVALUATED_RUNS = Q(job_spec__has_key="evaluation")


def frozen_value(path: str, *, via: str = "", text: bool = False):
    """The frozen fact at ``path`` (a ``*_PATH``) of the run reached by ``via`` (``"run__"``
    from a trial), as JSON or, with ``text``, as text: for annotations over many rows."""
    field, *keys = path.split("__")
    expression = f"{via}{field}"
    for key in keys[:-1]:
        expression = KeyTransform(key, expression)
    return (KeyTextTransform if text else KeyTransform)(keys[-1], expression)


# The runs whose frozen engine is the simulator (the rule of ``engine_is_simulated``).
SIMULATED_RUNS = Q(**{ENGINE_KIND_PATH: Engine.SIM})
# Stand-ins for the per-attempt parts while a frozen job is checked; never stored.
_CHECK_RUN_ID = uuid.UUID(int=0)
_CHECK_DEADLINE = datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC)


def _model_source(
    model, *, endpoint=None, trust_remote_code=False, lora_adapters=()
) -> protocol.ModelSource:
    """The model as its jobs carry it: the columns and, for a model read from a config.json,
    the facts beyond them (none for one stated by its columns: its job reads as before). An
    existing endpoint is asked for its own served model name."""
    return protocol.ModelSource(
        hf_repo=model.hf_repo,
        revision=model.revision,
        served_model_name=endpoint.served_model_name if endpoint else model.hf_repo,
        parameter_count=model.parameter_count,
        num_layers=model.num_layers,
        hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads,
        num_kv_heads=model.num_kv_heads,
        head_dim=model.head_dim,
        dtype=model.dtype,
        max_context=model.max_context,
        architecture=_architecture(model),
        trust_remote_code=trust_remote_code,
        lora_adapters=[protocol.LoraAdapter.model_validate(a) for a in lora_adapters],
    )


def _architecture(model) -> protocol.ModelArchitecture | None:
    if not model.architecture:
        return None
    return protocol.ModelArchitecture.model_validate(model.architecture)


def run_traffic_seed() -> int:
    """A fresh traffic seed for a run whose experiment fixes none."""
    return secrets.randbelow(protocol.MAX_SEED + 1)


def run_noise_seed() -> int:
    """A fresh seed of the simulator's noise for a simulated run that is not given one: each
    run is then a realistic re-run, and the seed it stores reproduces it exactly."""
    return secrets.randbelow(protocol.MAX_SEED + 1)


def job_spec_freeze(
    *,
    experiment: Experiment,
    price_usd_per_gpu_hour: Decimal | None = None,
    search_prior: protocol.SearchPrior | None = None,
    noise_seed: int | None = None,
) -> dict:
    """The frozen job of a run of ``experiment`` as stored (see the module docstring);
    trials in the grid's deterministic order; a search's limit in dollars at
    ``price_usd_per_gpu_hour`` (the estimate's, as the run starts), its predictions from
    ``search_prior`` (the organization's latest calibration, when there is one). A simulated
    run's noise seed is ``noise_seed``, or a fresh one (``run_noise_seed``); the traffic's is
    the experiment's, or a fresh one."""
    # Each trial names its image only when the run has several (one pod per image).
    several_images = len(experiment_image_tags(experiment)) > 1
    try:
        plan = experiment_trial_plan(experiment)
        workload = protocol.Workload.model_validate(experiment.workload)
        job = protocol.JobSpec(
            run_id=_CHECK_RUN_ID,
            trials=[
                protocol.TrialSpec(
                    index=index,
                    serve_config=trial.serve_config,
                    image_tag=trial.image_tag if several_images else None,
                )
                for index, trial in enumerate(plan)
            ],
            workload=workload,
            slos=protocol.Slos.model_validate(experiment.slos),
            # Every trial of the run is sent the traffic of this seed; an experiment that
            # fixes one replays the same traffic in every run.
            seed=workload.seed if workload.seed is not None else run_traffic_seed(),
            engine=protocol.EngineSpec(
                kind=experiment.engine,
                image_tag=experiment.engine_image_tag or None,
                vllm_version=vllm_version_of_tag(experiment.engine_image_tag),
                gpu_type=experiment.gpu_type_id,
                gpu_count=experiment.gpu_count,
                # How much faster than the modelled GPU the simulator runs (its figures are
                # reported in the GPU's time whatever this is); no effect on real vLLM.
                sim_speed=float(getattr(settings, "BENCHSITE_SIM_SPEED", 1.0)),
                noise_seed=(
                    (run_noise_seed() if noise_seed is None else noise_seed)
                    if engine_is_simulated(experiment.engine)
                    else None
                ),
                base_url=experiment.endpoint.base_url if experiment.endpoint else None,
            ),
            model=_model_source(
                experiment.model,
                endpoint=experiment.endpoint,
                trust_remote_code=experiment.trust_remote_code,
                lora_adapters=experiment.lora_adapters,
            ),
            deadline=_CHECK_DEADLINE,
            search=job_search(
                experiment.search,
                gpu_count=experiment.gpu_count,
                price_usd_per_gpu_hour=price_usd_per_gpu_hour,
                prior=search_prior,
            ),
            # The set's items (or the pack) and the judge, as they are now: later edits of
            # the set or the endpoint never change what this run scores.
            evaluation=job_evaluation(experiment),
        )
    except protocol.ServeGridError as exc:
        raise _refusal(exc.errors, prefix="serve_grid.") from exc
    except pydantic.ValidationError as exc:
        # Paths within the job (``workload.dataset.input_len``, ``engine.gpu_count``).
        raise _refusal(protocol.pydantic_field_errors(exc)) from exc
    return job.model_dump(mode="json", exclude=set(PER_ATTEMPT))


def _as_stored(experiment: Experiment, name: str) -> Decimal:
    # As the column holds it ("50.00"), also from an instance not read back from it.
    places = Experiment._meta.get_field(name).decimal_places
    return Decimal(getattr(experiment, name)).quantize(Decimal(1).scaleb(-places))


def experiment_snapshot(experiment: Experiment, estimate: CostEstimate) -> dict:
    """The experiment's facts, as they were when the run started, that its frozen job does not
    hold (later edits never rewrite history)."""
    return {
        "name": experiment.name,
        "model": str(experiment.model_id),
        "cloud_type": experiment.cloud_type,
        "fallback_gpu_types": list(experiment.fallback_gpu_types or []),
        "allow_other_cloud": experiment.allow_other_cloud,
        "container_disk_gb": experiment.container_disk_gb,
        "network_volume_id": experiment.network_volume_id,
        # How often a run that loses its pod may go on on a new one (runs.services.run_resume).
        "max_resumes": settings.BENCHSITE_MAX_RESUMES,
        "budget_cap_usd": str(_as_stored(experiment, "budget_cap_usd")),
        "estimate_usd": None if estimate.cost_usd is None else str(estimate.cost_usd),
        "estimate_seconds": estimate.total_seconds,
        # Of which measuring the trials (cold starts and levels): what a search may save.
        "estimate_trial_seconds": estimate.cold_start_seconds + estimate.sweep_seconds,
        # The least quality a recommendation must keep (runs.experiment_evaluation
        # .QualityFloor as stored; None: none), applied by the answer.
        "quality_floor": (experiment.evaluation or {}).get("quality_floor"),
        # The simulator's calibration the estimate (and a search's prior) used, None: none.
        "calibration": estimate.calibration,
        # An existing endpoint's id, name and price as the run started (None: no endpoint).
        "endpoint": (
            None
            if experiment.endpoint is None
            else {
                "id": str(experiment.endpoint.id),
                "name": experiment.endpoint.name,
                **experiment.endpoint.price_snapshot(),
            }
        ),
    }


def run_frozen_fields(
    *,
    experiment: Experiment,
    estimate: CostEstimate,
    search_prior: protocol.SearchPrior | None = None,
    noise_seed: int | None = None,
) -> dict:
    """The fields that freeze a run of ``experiment`` when it starts (``Run(**fields)``):
    its job (a search's predictions from ``search_prior``, the simulator's ``noise_seed``)
    and the experiment's other facts. Raises ``DomainValidationError`` for a job the
    protocol refuses."""
    return {
        "job_spec": job_spec_freeze(
            experiment=experiment,
            price_usd_per_gpu_hour=estimate.price_usd_per_gpu_hour,
            search_prior=search_prior,
            noise_seed=noise_seed,
        ),
        "experiment_snapshot": experiment_snapshot(experiment, estimate),
    }


def _refusal(errors, *, prefix: str = "") -> DomainValidationError:
    fields: dict[str, list[str]] = {}
    for error in errors:
        path = f"{prefix}{error.field}" if error.field else prefix.rstrip(".") or "experiment"
        fields.setdefault(path, []).append(error.message)
    return DomainValidationError(fields)


def job_spec_for_attempt(
    run: Run,
    *,
    deadline: datetime.datetime,
    report: protocol.ReportTo,
    gpu_type: str | None = None,
    skip_trials: set[int] | frozenset[int] = frozenset(),
) -> protocol.JobSpec:
    """The frozen job of ``run`` with one attempt's parts: its deadline, where to report,
    the GPU type its placement chose (default: the frozen one), and the trials this pod runs:
    those not ended on an earlier pod (``skip_trials``; their indices kept) on the first image
    that has any left, whose tag and vLLM version the engine then names."""
    frozen = run.job_spec
    tag = run_next_image_tag(run, skip_trials=skip_trials)
    engine = dict(
        frozen["engine"],
        gpu_type=gpu_type or frozen["engine"]["gpu_type"],
        image_tag=tag,
        vllm_version=vllm_version_of_tag(tag) if tag else frozen["engine"]["vllm_version"],
    )
    trials = [
        trial
        for trial in frozen["trials"]
        if trial["index"] not in skip_trials and _image_tag_of(frozen, trial) == tag
    ]
    attempt = {
        "run_id": str(run.id),
        "deadline": deadline.isoformat(),
        "report": report.model_dump(mode="json"),
    }
    job = {**frozen, "engine": engine, "trials": trials, **attempt}
    # Read back as the agent reads it (JSON), so the job served is the one it will parse.
    return protocol.JobSpec.model_validate_json(json.dumps(job))


def run_engine(run: Run) -> protocol.EngineSpec:
    """What serves the run's trials, as started (``gpu_type``: the experiment's own)."""
    return protocol.EngineSpec.model_validate(run.job_spec["engine"])


def run_is_simulated(run: Run) -> bool:
    """Whether the run's frozen engine is the simulator: its figures are not measurements
    and it rents no GPU."""
    return engine_is_simulated(run.job_spec["engine"]["kind"])


@dataclass(frozen=True)
class EndpointPrice:
    """An existing endpoint's price as a run froze it (each None: not priced that way)."""

    usd_per_hour: Decimal | None
    usd_per_1m_input_tokens: Decimal | None
    usd_per_1m_output_tokens: Decimal | None

    @property
    def per_token(self) -> bool:
        return self.usd_per_1m_input_tokens is not None


def run_quality_floor(run: Run) -> dict | None:
    """The experiment's quality floor as the run started (``min_score``,
    ``max_points_below_best`` or ``max_points_below_best_model``); None: none (also for a
    run frozen before floors were)."""
    return run.experiment_snapshot.get("quality_floor") or None


def run_evaluation_source(run: Run) -> tuple[str | None, str | None]:
    """What the run's trials were scored on, as started: (built-in pack, uploaded set's
    sha256), one of them; (None, None) for a run without an evaluation."""
    evaluation = run.job_spec.get("evaluation") or {}
    return evaluation.get("pack"), evaluation.get("set_sha256")


def run_endpoint(run: Run) -> dict | None:
    """The existing endpoint the run measured (id, name, price), or None for other engines."""
    return run.experiment_snapshot.get("endpoint")


def run_endpoint_price(run: Run) -> EndpointPrice | None:
    """The endpoint's price as the run started; None for a run of another engine and for an
    endpoint without a price (its cost is unknown, never zero)."""
    frozen = run_endpoint(run)
    if frozen is None:
        return None
    values = [
        None if frozen.get(key) is None else Decimal(frozen[key])
        for key in ("usd_per_hour", "usd_per_1m_input_tokens", "usd_per_1m_output_tokens")
    ]
    return None if all(value is None for value in values) else EndpointPrice(*values)


def run_cost_is_known(run: Run) -> bool:
    """Whether the run's ``cost_usd`` is what it cost: always, except for an existing endpoint
    without a price (then unknown, not zero)."""
    return run_endpoint(run) is None or run_endpoint_price(run) is not None


def _image_tag_of(frozen: dict, trial: dict) -> str | None:
    return trial.get("image_tag") or frozen["engine"]["image_tag"]


def run_planned_trials(run: Run) -> list[PlannedTrial]:
    """Each planned trial's image and serve configuration, in trial order."""
    frozen = run.job_spec
    return [
        PlannedTrial(image_tag=_image_tag_of(frozen, trial), serve_config=trial["serve_config"])
        for trial in frozen["trials"]
    ]


def run_next_image_tag(
    run: Run, *, skip_trials: set[int] | frozenset[int] = frozenset()
) -> str | None:
    """The image of the first planned trial not in ``skip_trials`` (the ended ones): the
    image the run's next pod runs; the frozen engine's when none is left."""
    frozen = run.job_spec
    left = (trial for trial in frozen["trials"] if trial["index"] not in skip_trials)
    first = next(left, None)
    return frozen["engine"]["image_tag"] if first is None else _image_tag_of(frozen, first)


def run_workload(run: Run) -> protocol.Workload:
    return protocol.Workload.model_validate(run.job_spec["workload"])


def run_model(run: Run) -> protocol.ModelSource:
    return protocol.ModelSource.model_validate(run.job_spec["model"])


def run_placements(run: Run) -> list[Placement]:
    """The placements a run allows, as it was started: its frozen job's GPU type, then the
    choices frozen beside it."""
    frozen = run.experiment_snapshot
    return placements(
        gpu_type_id=run_engine(run).gpu_type,
        cloud_type=frozen["cloud_type"],
        fallback_gpu_types=frozen["fallback_gpu_types"],
        allow_other_cloud=frozen["allow_other_cloud"],
    )


def run_cloud_type(run: Run) -> str:
    """The cloud the run was started for (its pod's may differ: ``Run.pod_cloud_type``)."""
    return run.experiment_snapshot["cloud_type"]


def run_estimate_seconds(run: Run) -> float:
    """How long the run was estimated to take when it started."""
    return float(run.experiment_snapshot["estimate_seconds"])


def run_pod_storage(run: Run) -> tuple[int, str | None]:
    """The pod's container disk (GB) and network volume (None: none) the run was started
    with."""
    frozen = run.experiment_snapshot
    return int(frozen["container_disk_gb"]), frozen["network_volume_id"] or None


def run_budget_cap(run: Run) -> Decimal:
    """The experiment's cap as it was when the run started."""
    return Decimal(run.experiment_snapshot["budget_cap_usd"])
