"""The organization's calibrations of the simulator (``runs.models.Calibration``): the step
model's constants fitted to its measured runs of one model on one GPU type and vLLM
version, reused by every later prediction of the same key — the builder's prediction, the
pre-run estimate and a search's prior.

Guarantees:

- The newest wins: a prediction uses the key's latest calibration and says which (its id,
  when, from which runs, from how many levels) and how far that calibration's own fit was
  off (mean absolute error of its levels, over all and per metric, with the simulator's
  defaults beside it) — ``CalibrationSource.as_json``, one shape for the page and the API.
- Only the organization's own: another tenant's calibration is never read. Only
  measurements made one (``runs.services.calibrations``); a simulated experiment is never
  predicted with one (the simulator's runs have no vLLM version to be calibrated for).
"""

from __future__ import annotations

import datetime
import uuid
from dataclasses import dataclass

from runs.experiment_search import PREDICTING_STRATEGIES
from runs.experiment_spec import vllm_version_key
from runs.models import Calibration


@dataclass(frozen=True)
class CalibrationSource:
    """A calibration, the runs it came from and its own fit error."""

    id: int
    constants: dict[str, float]
    created_at: datetime.datetime
    vllm_version: str
    run_ids: tuple[uuid.UUID, ...]  # newest first
    points: int
    fit_error_pct: float
    error_before_pct: float
    metrics: dict

    def as_json(self) -> dict:
        """What a prediction says of the calibration it used (module docstring)."""
        return {
            "id": self.id,
            "created_at": self.created_at.isoformat(),
            "vllm_version": self.vllm_version,
            "runs": [str(run_id) for run_id in self.run_ids],
            "points": self.points,
            "fit_error_pct": self.fit_error_pct,
            "error_before_pct": self.error_before_pct,
            "metrics": self.metrics,
            "constants": self.constants,
        }


def latest_calibration(
    *, org_id, model_id, gpu_type_id: str, image_tag: str
) -> CalibrationSource | None:
    """The newest calibration of ``model_id`` on ``gpu_type_id`` with the vLLM version of
    ``image_tag`` among the organization's, or None."""
    row = (
        Calibration.objects.filter(
            organization_id=org_id,
            model_id=model_id,
            gpu_type_id=gpu_type_id,
            vllm_version=vllm_version_key(image_tag or ""),
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if row is None:
        return None
    runs = row.runs.order_by("-finished_at", "-created_at").values_list("id", flat=True)
    return CalibrationSource(
        id=row.id,
        constants=dict(row.constants),
        created_at=row.created_at,
        vllm_version=row.vllm_version,
        run_ids=tuple(runs),
        points=row.points,
        fit_error_pct=row.error_after_pct,
        error_before_pct=row.error_before_pct,
        metrics=dict(row.metrics),
    )


def experiment_calibration(experiment) -> CalibrationSource | None:
    """The calibration predictions of ``experiment`` use: the newest for its model, GPU type
    and image's vLLM version; None for an experiment not served by vLLM."""
    if experiment.engine != "vllm" or experiment.model_id is None:
        return None
    return latest_calibration(
        org_id=experiment.organization_id,
        model_id=experiment.model_id,
        gpu_type_id=experiment.gpu_type_id,
        image_tag=experiment.engine_image_tag,
    )


def search_prior(experiment) -> CalibrationSource | None:
    """The calibration a run of ``experiment`` starts its search's predictions from: its
    ``experiment_calibration``, when it searches with predictions on one vLLM image."""
    strategy = (experiment.search or {}).get("strategy")
    if strategy not in PREDICTING_STRATEGIES or experiment.compare_image_tags:
        return None
    return experiment_calibration(experiment)
