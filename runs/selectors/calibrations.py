"""The organization's calibrations of the simulator: the step model's constants that a run's
search fitted to what it measured (``Run.search``, the agent's ``search_finished``), for one
(GPU type, model, image), reused by later predictions of the same.

Guarantees:

- One truth: a calibration is read from the run that made it, never copied; the source run
  comes with it (its id and end), so every prediction that uses one says which.
- Only measurements calibrate: a run on the simulator (whose figures are the simulator's
  own) never does, nor a fit the search did not use (it predicted the measured trials worse
  than the defaults), nor a run of another organization.
- The newest wins: the calibration of the latest run to finish on that GPU type (where its
  pod ran), of that model (as the run was started), on that image.
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from django.db.models import Q

from runs.experiment_search import PREDICTING_STRATEGIES
from runs.frozen_job import GPU_TYPE_PATH, MODEL_PATH, SIMULATED_RUNS
from runs.models import Run

# How many of the newest candidate runs are read: a calibration older than these is stale.
RECENT_RUNS = 50


@dataclass(frozen=True)
class CalibrationSource:
    """A calibration and the run it came from."""

    constants: dict[str, float]
    run_id: uuid.UUID
    finished_at: datetime.datetime | None
    image_tag: str
    fit_error_pct: float | None


def latest_calibration(
    *, org_id, model_id, gpu_type_id: str, image_tag: str
) -> CalibrationSource | None:
    """The newest used calibration of ``model_id`` on ``gpu_type_id`` with ``image_tag``
    among the organization's runs (module docstring), or None."""
    on_gpu = Q(pod_gpu_type=gpu_type_id) | Q(pod_gpu_type="", **{GPU_TYPE_PATH: gpu_type_id})
    runs = (
        Run.objects.filter(organization_id=org_id, **{MODEL_PATH: str(model_id)})
        .filter(on_gpu)
        .exclude(SIMULATED_RUNS)
        .exclude(search={})
        .order_by("-finished_at", "-created_at")
        .only("id", "finished_at", "search")[:RECENT_RUNS]
    )
    for run in runs:
        calibration = (run.search.get(image_tag) or {}).get("calibration")
        if calibration and calibration.get("used"):
            return CalibrationSource(
                constants=dict(calibration["constants"]),
                run_id=run.id,
                finished_at=run.finished_at,
                image_tag=image_tag,
                fit_error_pct=calibration.get("fit_error_pct"),
            )
    return None


def search_prior(experiment) -> CalibrationSource | None:
    """The calibration a run of ``experiment`` starts its search's predictions from: the
    latest for its GPU type, model and image, when it searches with predictions on one vLLM
    image (a calibration is an image's; the simulator's runs have none)."""
    strategy = (experiment.search or {}).get("strategy")
    if (
        strategy not in PREDICTING_STRATEGIES
        or experiment.engine != "vllm"
        or experiment.compare_image_tags
    ):
        return None
    return latest_calibration(
        org_id=experiment.organization_id,
        model_id=experiment.model_id,
        gpu_type_id=experiment.gpu_type_id,
        image_tag=experiment.engine_image_tag,
    )
