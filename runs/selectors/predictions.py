"""Predict before renting: every configuration of an experiment's grid run on the vLLM
simulator offline (``agents.predict``), for the builder and the API — nothing is rented,
nothing is stored.

Guarantees:

- Everything here is simulated and says so (``GridPrediction.simulated``); it is never
  stored as a measurement.
- Each configuration of the run's plan is predicted under the experiment's own workload and
  SLOs (an uploaded dataset, ShareGPT or a trace's window, read from its stored file as the
  agent replays it); with SLOs, its capacity at them (a capacity search runs even when the
  workload asks for none: capacity is what the prediction is for). Each image is predicted
  with its vLLM version's defaults for the flags a configuration leaves out; the same serve
  configuration on two images of one version is predicted once.
- Cost per 1M output tokens at capacity is the pod's price (``runs.costs``: the
  organization's price of the experiment's GPU type and cloud × its GPU count) over the
  predicted throughput at capacity; ``best`` is the configuration with the lowest one.
- Bounded: the whole grid simulates at most ``WORK_BUDGET`` request-steps (about one output
  token each), shared out over its distinct configurations, so a request's CPU is bounded
  whatever the workload; a grid that needs more is predicted up to where it ran out and
  says so (``too_large``), pointing at ``benchsite-agent predict``, which has no bound.
- ``exhaustive_gpu_minutes``: what measuring every configuration would take on the GPU in
  simulated time — each configuration's start-up and levels; provisioning and downloads are
  the estimate's (``runs.selectors.estimates``).
- Calibrated where the organization has measured: a vLLM experiment is predicted with the
  newest calibration of its model on its GPU type and vLLM version
  (``runs.selectors.calibrations``), and says which (``calibration``: when, from which runs,
  its own fit error); otherwise with the defaults.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from agents.hardware import DEFAULT_EFFICIENCY, Efficiency
from agents.predict import WorkTooLarge, predict_workload
from agents.protocol import Slos, Workload
from runs.costs import GpuShare, level_cost_per_million_output_tokens, pod_usd_per_hr
from runs.experiment_spec import PlannedTrial, experiment_trial_plan, vllm_version_of_tag
from runs.models import Experiment, WorkloadDataset
from runs.selectors.calibrations import experiment_calibration
from runs.selectors.prices import gpu_price
from runs.selectors.run_levels import image_config_labels


@dataclass
class ConfigPrediction:
    """One configuration's simulated figures."""

    label: str
    image_tag: str | None
    serve_config: dict
    starts: bool
    refusal: str | None = None
    capacity: float | None = None  # the load (users or req/s) at which every SLO held
    capacity_axis: str | None = None
    output_throughput: float | None = None  # tokens/s at capacity (or the best level)
    cost_per_million_usd: Decimal | None = None
    priced_for: str = ""  # "priced for 1 of 4 GPUs" (runs.costs.GpuShare)
    gpu_seconds: float = 0.0
    kv_cache_tokens: int | None = None


@dataclass
class GridPrediction:
    """The whole grid's prediction (module docstring)."""

    rows: list[ConfigPrediction] = field(default_factory=list)
    best: int | None = None  # index into rows
    exhaustive_gpu_minutes: float = 0.0
    price_usd_per_gpu_hour: Decimal | None = None
    price_source: str = ""
    with_slos: bool = False
    warnings: list[str] = field(default_factory=list)
    cpu_seconds: float = 0.0
    too_large: bool = False
    simulated: bool = True
    # The calibration used (CalibrationSource.as_json), None: the defaults.
    calibration: dict | None = None


# Request-steps the simulator may compute for one prediction: about 20 s of one core
# (measured: about 150,000 per second).
WORK_BUDGET = 3_000_000


def _uploaded_file(experiment: Experiment, workload: Workload) -> Path | None:
    """The local file of the uploaded dataset the workload names (ShareGPT or a trace: every
    kind that names one has a ``dataset_id``); None when it names none or it is gone."""
    dataset_id = getattr(workload.dataset, "dataset_id", None)
    if dataset_id is None:
        return None
    dataset = WorkloadDataset.objects.filter(
        organization=experiment.organization_id, id=dataset_id
    ).first()
    return Path(dataset.file.path) if dataset is not None else None


def _throughput(levels: list[dict], capacity: dict | None, with_slos: bool) -> float | None:
    """Tokens/s the configuration serves: at its capacity with SLOs; without, its best level."""
    if with_slos:
        return capacity.get("output_throughput") if capacity else None
    return max((level.get("output_throughput") or 0.0 for level in levels), default=None)


def _calibrated_efficiency(experiment: Experiment, result: GridPrediction) -> Efficiency:
    """The organization's latest calibration for the experiment's GPU type, model and vLLM
    version (recorded in ``result``), or the simulator's defaults."""
    source = experiment_calibration(experiment)
    if source is None:
        return DEFAULT_EFFICIENCY
    result.calibration = source.as_json()
    return Efficiency.from_constants(source.constants)


def _prediction_key(planned: PlannedTrial) -> str:
    """Trials that predict the same: one serve configuration under one vLLM version."""
    version = vllm_version_of_tag(planned.image_tag or "")
    return repr((version, sorted(planned.serve_config.items())))


def experiment_prediction(*, experiment: Experiment) -> GridPrediction:
    """Every configuration of ``experiment`` predicted on the simulator (module docstring)."""
    started = time.process_time()
    result = GridPrediction()
    hardware = experiment.gpu_type.hardware
    if hardware is None:
        result.warnings.append(
            f"The simulator has no profile of {experiment.gpu_type.display_name}: "
            "nothing can be predicted for it."
        )
        return result
    workload = Workload.model_validate(experiment.workload)
    slos = Slos.model_validate(experiment.slos or {})
    result.with_slos = slos.given
    uploaded = _uploaded_file(experiment, workload)
    if uploaded is None and getattr(workload.dataset, "dataset_id", None) is not None:
        result.warnings.append("The workload's dataset is gone: nothing can be predicted.")
        return result
    price = gpu_price(
        org=experiment.organization,
        gpu_type=experiment.gpu_type,
        cloud_type=experiment.cloud_type,
    )
    result.price_usd_per_gpu_hour, result.price_source = price.usd_per_gpu_hour, price.source
    pod_rate = (
        pod_usd_per_hr(gpu_usd_per_hr=price.usd_per_gpu_hour, gpu_count=experiment.gpu_count)
        if price.usd_per_gpu_hour is not None
        else None
    )
    if pod_rate is None:
        result.warnings.append("No price for this GPU type: costs per token are left out.")
    efficiency = _calibrated_efficiency(experiment, result)
    plan = experiment_trial_plan(experiment)
    labels = image_config_labels(plan)
    distinct = {_prediction_key(p) for p in plan}
    budget = WORK_BUDGET // max(1, len(distinct))
    seen: dict[str, object] = {}
    for planned, label in zip(plan, labels, strict=True):
        key = _prediction_key(planned)
        if key not in seen:
            try:
                seen[key] = predict_workload(
                    experiment.model.facts,
                    hardware,
                    planned.serve_config,
                    workload,
                    slos,
                    dataset_path=uploaded,
                    efficiency=efficiency,
                    vllm_version=vllm_version_of_tag(planned.image_tag or ""),
                    work_budget=budget,
                )
            except WorkTooLarge:
                result.too_large = True
                result.warnings.append(
                    f"Too large to predict on the site: each configuration may simulate "
                    f"{budget:,} request-steps here. `benchsite-agent predict` has no such "
                    "bound."
                )
                break
        prediction = seen[key]
        row = ConfigPrediction(
            label=label,
            image_tag=planned.image_tag,
            serve_config=planned.serve_config,
            starts=prediction.starts,
            refusal=prediction.refusal_summary,
            kv_cache_tokens=prediction.kv_cache_tokens,
            gpu_seconds=prediction.gpu_seconds,
        )
        if prediction.starts:
            capacity = prediction.capacity
            if capacity is not None:
                row.capacity = capacity.get("capacity")
                row.capacity_axis = capacity.get("axis")
            row.output_throughput = _throughput(prediction.levels, capacity, slos.given)
            if pod_rate is not None and row.output_throughput:
                share = GpuShare.of(planned.serve_config, pod_gpus=experiment.gpu_count)
                row.priced_for = share.describe()
                row.cost_per_million_usd = level_cost_per_million_output_tokens(
                    output_throughput_tok_s=row.output_throughput,
                    pod_usd_per_hr=pod_rate,
                    share=share,
                )
        result.rows.append(row)
        result.exhaustive_gpu_minutes += row.gpu_seconds / 60
    ranked = [i for i, row in enumerate(result.rows) if row.output_throughput]
    if ranked:
        result.best = max(ranked, key=lambda i: result.rows[i].output_throughput)
    result.exhaustive_gpu_minutes = round(result.exhaustive_gpu_minutes, 1)
    result.cpu_seconds = round(time.process_time() - started, 2)
    return result
