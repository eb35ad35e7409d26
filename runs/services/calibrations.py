"""Refit the simulator to an organization's own measurements: when a measured vLLM run
succeeds, its model's constants on each GPU type and vLLM version it measured are fitted
again to the newest measured levels of that key (``agents.search.calibration``: ITL, TTFT
and throughput) and stored (``runs.models.Calibration``) for predictions to use.

Guarantees:

- Only measurements calibrate: a run on the simulator or against an existing endpoint never
  refits, nor feeds a fit; only succeeded runs' succeeded or partial trials of the same
  organization count, and no level the agent marked simulated.
- Outside the run's end: the refit is a task enqueued when the ending transaction commits
  (``calibration_refit_on_commit``), so a slow or failing fit never holds back ingest.
- Idempotent: a run refits each key once (``Calibration.made_by``); a second delivery of the
  task finds the row and writes nothing.
- A fit refused (too few levels, or no better than the simulator's defaults) stores nothing:
  the key's newest calibration stays what it was.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass

from django.db import transaction

from agents.search.calibration import LevelPoint, calibrate, level_points
from runs.experiment_spec import vllm_version_key
from runs.models import Calibration, GpuType, ModelSpec, Run, Trial
from runs.models.experiments import Engine
from runs.models.runs import MEASURED_OUTCOMES, RunState
from runs.run_as_started import ENGINE_KIND_PATH, MODEL_PATH, run_engine, run_model
from runs.task_queue import enqueue_after_commit

logger = logging.getLogger(__name__)

# The newest runs of a key a refit reads, and the most levels it fits (the newest first).
RECENT_RUNS = 20
MAX_POINTS = 240


@dataclass(frozen=True)
class CalibrationKey:
    """What a calibration is of, beside its organization and model."""

    gpu_type_id: str
    vllm_version: str


def run_feeds_calibration(run: Run) -> bool:
    """Whether ``run``'s measurements calibrate the simulator: a succeeded run of real vLLM."""
    return run.state == RunState.SUCCEEDED and run_engine(run).kind == Engine.VLLM


def _gpu_of_image(run: Run) -> dict[str, str]:
    """Where each image's pod ran: the pods the run left, then its last one."""
    gpus = {
        pod.get("image_tag") or "": pod["gpu_type"]
        for pod in run.pod_history or []
        if pod.get("gpu_type")
    }
    if run.pod_gpu_type:
        gpus[run.pod_image_tag or ""] = run.pod_gpu_type
    return gpus


def _measured_trials(run: Run) -> dict[CalibrationKey, list[Trial]]:
    """The run's measured trials by the key they calibrate."""
    engine = run_engine(run)
    gpus = _gpu_of_image(run)
    keyed: dict[CalibrationKey, list[Trial]] = defaultdict(list)
    trials = Trial.objects.filter(run=run, outcome__in=MEASURED_OUTCOMES).prefetch_related(
        "measurements"
    )
    for trial in trials:
        tag = trial.image_tag or engine.image_tag or ""
        gpu = gpus.get(tag) or gpus.get("") or engine.gpu_type
        keyed[CalibrationKey(gpu, vllm_version_key(tag))].append(trial)
    return keyed


def _measured_levels(trial: Trial) -> list[dict]:
    """A trial's levels as the agent reported them, the server's figures under ``server``."""
    return [
        {**measurement.result, "server": measurement.server_metrics}
        for measurement in trial.measurements.all()
        if not measurement.result.get("simulated")
    ]


def _key_points(run: Run, key: CalibrationKey, gpu: GpuType) -> tuple[list[LevelPoint], list]:
    """The newest measured levels of ``key`` for ``run``'s model in its organization, and
    the runs they came from."""
    candidates = (
        Run.objects.filter(
            organization_id=run.organization_id,
            state=RunState.SUCCEEDED,
            **{MODEL_PATH: run.experiment_snapshot.get("model"), ENGINE_KIND_PATH: Engine.VLLM},
        )
        .exclude(finished_at=None)
        .order_by("-finished_at", "-created_at")[:RECENT_RUNS]
    )
    points: list[LevelPoint] = []
    sources = []
    for source in candidates:
        facts = run_model(source).facts()
        found = [
            point
            for trial in _measured_trials(source).get(key, [])
            for point in level_points(
                facts, gpu.hardware, trial.serve_config, _measured_levels(trial)
            )
        ]
        if found:
            points += found
            sources.append(source)
        if len(points) >= MAX_POINTS:
            break
    return points[:MAX_POINTS], sources


def calibration_refit(*, run_id) -> list[Calibration]:
    """The calibrations ``run_id``'s success made (module docstring): one per key it
    measured whose fit was accepted; [] for a run that does not calibrate."""
    run = Run.objects.filter(id=run_id).first()
    if run is None or not run_feeds_calibration(run):
        return []
    model = ModelSpec.objects.filter(
        id=run.experiment_snapshot.get("model"), organization_id=run.organization_id
    ).first()
    if model is None:
        return []
    made = []
    for key in _measured_trials(run):
        done = Calibration.objects.filter(
            made_by=run, gpu_type_id=key.gpu_type_id, vllm_version=key.vllm_version
        ).first()
        if done is not None:
            made.append(done)
            continue
        gpu = GpuType.objects.filter(id=key.gpu_type_id).first()
        if gpu is None or gpu.hardware is None:
            continue
        points, sources = _key_points(run, key, gpu)
        fit = calibrate(points)
        if fit is None:
            logger.info("run %s: no calibration of %s (%d levels)", run.id, key, len(points))
            continue
        with transaction.atomic():
            row, created = Calibration.objects.get_or_create(
                made_by=run,
                gpu_type=gpu,
                vllm_version=key.vllm_version,
                defaults={
                    "organization_id": run.organization_id,
                    "model": model,
                    "constants": fit.constants(),
                    "points": fit.points,
                    "error_before_pct": fit.error_before_pct,
                    "error_after_pct": fit.error_after_pct,
                    "metrics": {
                        metric: {
                            "points": error.points,
                            "before_pct": error.before_pct,
                            "after_pct": error.after_pct,
                        }
                        for metric, error in fit.metrics.items()
                    },
                },
            )
            if created:
                row.runs.set(sources)
        made.append(row)
    return made


def calibration_refit_on_commit(run: Run) -> None:
    """Enqueues the refit of ``run``'s calibrations once the transaction that ended it
    commits, when its measurements calibrate (``run_feeds_calibration``)."""
    if not run_feeds_calibration(run):
        return
    enqueue_after_commit("runs.tasks.calibration_refit", str(run.id))
