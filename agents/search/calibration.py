"""Calibrate as you go: the step model's efficiency constants fitted to what real trials
measured, for one (GPU, model, image).

Guarantees:

- Each measured level gives one point: its mean inter-token latency against the step the
  model predicts for the level's mean batch — its mean running requests decoding at their
  mean context, plus the prompt tokens the level prefilled per step on average (every
  request's prompt is computed once over its output's steps).
- The fit is a bounded least squares on the log ratio of predicted to measured ITL over
  the constants that set a step's time (bandwidth and compute efficiency, the fixed step
  overhead, the host's cost per request), pulled weakly toward the current constants so that
  what the points cannot tell apart stays where it was.
- ``Calibration`` records the mean absolute error of the points before and after the fit;
  a fit that does not lower it is not used (``calibrate`` returns None), nor one from
  fewer than ``MIN_POINTS`` points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import least_squares

from agents.hardware import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    GpuProfile,
    ModelFacts,
    StartRefusal,
    StepModel,
    start_check,
)
from agents.search.outcomes import Outcome

MIN_POINTS = 3
# The constants fitted, their bounds, and how strongly each is held near its prior (a
# log-ratio residual of this weight per unit of log change).
FITTED = {
    "bandwidth": (0.2, 1.0),
    "flops": (0.1, 1.0),
    "step_overhead_s": (1e-5, 0.02),
    "per_sequence_s": (0.0, 5e-4),
}
PRIOR_WEIGHT = 0.05
# per_sequence_s may be 0: its prior residual is on this scale instead of a log ratio.
PER_SEQUENCE_SCALE_S = 20e-6


@dataclass(frozen=True)
class ItlPoint:
    """One measured level: the step model's inputs and the mean ITL it measured (s)."""

    step_model: StepModel
    batch: int
    context: int
    prefill_per_step: int
    measured_itl_s: float

    def predicted(self, efficiency: Efficiency) -> float:
        step = StepModel(
            self.step_model.model,
            self.step_model.gpu,
            self.step_model.settings,
            self.step_model.plan,
            efficiency,
        )
        batch = [(1, self.context)] * self.batch
        if self.prefill_per_step:
            batch.append((self.prefill_per_step, 0))
        return step.cost(batch, self.batch).seconds


@dataclass(frozen=True)
class Calibration:
    """Fitted constants, the points they came from, and the mean absolute percentage error
    of those points' ITL before and after the fit."""

    efficiency: Efficiency
    points: int
    error_before_pct: float
    error_after_pct: float


def itl_points(
    model: ModelFacts, gpu: GpuProfile, flags: Mapping[str, object], outcome: Outcome
) -> list[ItlPoint]:
    """The calibration points of one measured trial (module docstring); none from a level
    without completions, a mean ITL or the server's running gauge."""
    try:
        settings, plan = start_check(model, gpu, flags)
    except StartRefusal:
        return []
    step_model = StepModel(model, gpu, settings, plan)
    points = []
    for level in outcome.levels:
        completed = level.get("completed") or 0
        itl_ms = level.get("mean_itl_ms")
        running = ((level.get("server") or {}).get("num_requests_running") or {}).get("mean")
        if not completed or not itl_ms or not running:
            continue
        mean_in = (level.get("total_input_tokens") or 0) / completed
        mean_out = (level.get("total_output_tokens") or 0) / completed
        if mean_out < 2:
            continue
        batch = max(1, round(running))
        prefill = min(round(batch * mean_in / mean_out), settings.max_num_batched_tokens)
        points.append(
            ItlPoint(step_model, batch, round(mean_in + mean_out / 2), prefill, itl_ms / 1000)
        )
    return points


def _mean_error_pct(points: Sequence[ItlPoint], efficiency: Efficiency) -> float:
    errors = [abs(p.predicted(efficiency) / p.measured_itl_s - 1) for p in points]
    return 100 * sum(errors) / len(errors)


def calibrate(
    points: Sequence[ItlPoint], prior: Efficiency = DEFAULT_EFFICIENCY
) -> Calibration | None:
    """Constants fitted to ``points`` starting from ``prior`` (module docstring); None when
    there are too few points or the fit does not improve on the prior."""
    if len(points) < MIN_POINTS:
        return None
    names = list(FITTED)
    lower = np.array([FITTED[name][0] for name in names])
    upper = np.array([FITTED[name][1] for name in names])
    start = np.clip([getattr(prior, name) for name in names], lower, upper)

    def efficiency_at(x: np.ndarray) -> Efficiency:
        return replace(prior, **{name: float(value) for name, value in zip(names, x, strict=True)})

    def residuals(x: np.ndarray) -> np.ndarray:
        efficiency = efficiency_at(x)
        fit = [math.log(p.predicted(efficiency) / p.measured_itl_s) for p in points]
        held = []
        for name, value, initial in zip(names, x, start, strict=True):
            if name == "per_sequence_s":
                held.append(PRIOR_WEIGHT * (value - initial) / PER_SEQUENCE_SCALE_S)
            else:
                held.append(PRIOR_WEIGHT * math.log(value / initial))
        return np.array(fit + held)

    solution = least_squares(residuals, start, bounds=(lower, upper), x_scale="jac")
    fitted = efficiency_at(solution.x)
    before = _mean_error_pct(points, prior)
    after = _mean_error_pct(points, fitted)
    if not after < before:
        return None
    return Calibration(fitted, len(points), before, after)
