"""Calibrate from what was measured: the step model's efficiency constants fitted to real
levels of one (GPU, model, vLLM version), on inter-token latency, time to first token and
output throughput together.

Guarantees:

- Each measured level with completions and the server's running gauge gives one point: the
  metrics it measured (mean ITL, else mean TPOT; median TTFT; output throughput) against
  what the step model predicts for the level's own state. ITL: its mean running requests
  decoding at their mean context, the prompts the level prefilled spread over its steps.
  TTFT: the server's per-request overhead, its wait in the server's queue (Little's law on
  the waiting gauge), for the step in flight, and its prompt's chunked prefill beside
  those decodes. Throughput: its users cycling through TTFT and their output's
  decode, or at a request rate its running requests decoding, capped by the rate.
- The fit is a bounded least squares on the log ratio of predicted to measured, every
  metric of every point weighted alike, over the constants in ``FITTED`` that the running
  ``Efficiency`` has, pulled weakly toward the prior so that what the points cannot tell
  apart stays where it was. The constants come back through ``Efficiency.from_constants``:
  a field this module does not fit keeps the prior's value.
- ``Calibration`` records, per metric and over all, the points and the mean absolute
  percentage error before and after the fit; a fit that does not lower the overall error is
  not returned (``calibrate`` returns None), nor one from fewer than ``MIN_POINTS`` points.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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

MIN_POINTS = 3
# The metrics a point may carry: mean ITL (s), median TTFT (s), output throughput (tok/s).
METRICS = ("itl", "ttft", "throughput")


@dataclass(frozen=True)
class Bound:
    """A fitted constant's range, and how its prior holds it: on the log ratio, or for a
    constant that may be 0, on the difference in units of ``additive_scale``."""

    low: float
    high: float
    additive_scale: float | None = None


# The constants fitted and their bounds; a name the running Efficiency lacks is skipped.
FITTED = {
    "bandwidth": Bound(0.2, 1.0),
    "flops": Bound(0.1, 1.0),
    "step_overhead_s": Bound(1e-5, 0.02),
    "per_sequence_s": Bound(0.0, 5e-4, additive_scale=20e-6),
    "request_overhead_s": Bound(0.0, 0.2, additive_scale=2e-3),
}
# How strongly each constant is held near its prior: a residual of this weight per unit of
# log change (or of additive scale).
PRIOR_WEIGHT = 0.05
# Beyond this log ratio a residual counts less than its square (a soft L1 loss): a level the
# step model cannot describe (a TTFT set by arrivals it does not see) bends the fit less.
ROBUST_SCALE = 0.2


def fitted_names() -> list[str]:
    """The ``FITTED`` constants this version's ``Efficiency`` has."""
    known = {f.name for f in dataclasses.fields(Efficiency)}
    return [name for name in FITTED if name in known]


@dataclass(frozen=True)
class LevelPoint:
    """One measured level: the step model's inputs, the level's state as the server's
    gauges and the load generator saw it, and the metrics it measured (``METRICS``)."""

    step_model: StepModel
    batch: int  # mean running requests
    context: int  # a decoding request's mean context
    prompt: int  # mean prompt tokens
    output: int  # mean output tokens
    prefill_per_step: int
    queue_s: float  # mean wait in the server's queue (Little's law on its waiting gauge)
    concurrency: int | None  # users of a closed-loop level
    request_rate: float | None  # an open-loop level's rate (None: all at once)
    measured: Mapping[str, float]

    def predicted(self, efficiency: Efficiency) -> dict[str, float]:
        """What the step model with ``efficiency`` predicts for each measured metric."""
        step = StepModel(
            self.step_model.model,
            self.step_model.gpu,
            self.step_model.settings,
            self.step_model.plan,
            efficiency,
        )
        decodes = [(1, self.context)] * self.batch
        batch = list(decodes)
        if self.prefill_per_step:
            batch.append((self.prefill_per_step, 0))
        itl = step.cost(batch, self.batch).seconds
        # A new prompt waits for the step in flight (half of one on average when others
        # run), then is prefilled in chunks of the budget the running decodes leave.
        others = decodes[: max(0, self.batch - 1)]
        budget = max(1, self.step_model.settings.max_num_batched_tokens - len(others))
        prefill, done = 0.0, 0
        while done < self.prompt:
            new = min(budget, self.prompt - done)
            prefill += step.cost([*others, (new, done)], len(others) + 1).seconds
            done += new
        wait = itl / 2 if others else 0.0
        ttft = efficiency.request_overhead_s + self.queue_s + wait + prefill
        if self.concurrency is not None:
            cycle = ttft + max(0, self.output - 1) * itl
            throughput = self.concurrency * self.output / cycle
        else:
            throughput = self.batch / itl
            if self.request_rate is not None:
                throughput = min(throughput, self.request_rate * self.output)
        figures = {"itl": itl, "ttft": ttft, "throughput": throughput}
        return {metric: figures[metric] for metric in self.measured}


@dataclass(frozen=True)
class MetricError:
    """One metric's points and mean absolute percentage error before and after a fit."""

    points: int
    before_pct: float
    after_pct: float


@dataclass(frozen=True)
class Calibration:
    """Fitted constants, how many levels they came from, and the mean absolute percentage
    error of those levels' metrics before and after the fit: over all and per metric."""

    efficiency: Efficiency
    points: int
    error_before_pct: float
    error_after_pct: float
    metrics: Mapping[str, MetricError] = dataclasses.field(default_factory=dict)

    def constants(self) -> dict[str, float]:
        """The fitted ``Efficiency`` as a calibration records it (every field)."""
        return dataclasses.asdict(self.efficiency)


def _level_measured(level: Mapping) -> dict[str, float]:
    itl_ms = level.get("mean_itl_ms") or level.get("mean_tpot_ms")
    ttft_ms = level.get("median_ttft_ms")
    throughput = level.get("output_throughput")
    measured = {
        "itl": itl_ms / 1000 if itl_ms else None,
        "ttft": ttft_ms / 1000 if ttft_ms else None,
        "throughput": throughput or None,
    }
    return {metric: value for metric, value in measured.items() if value and value > 0}


def level_points(
    model: ModelFacts, gpu: GpuProfile, flags: Mapping[str, object], levels: Sequence[Mapping]
) -> list[LevelPoint]:
    """The calibration points of one trial's measured ``levels`` (``bench --json``'s keys
    with the server's figures under ``server``; module docstring); none from a level
    without completions, a measured metric or the server's running gauge, nor from a
    configuration the start check refuses."""
    try:
        settings, plan = start_check(model, gpu, flags)
    except StartRefusal:
        return []
    step_model = StepModel(model, gpu, settings, plan)
    points = []
    for level in levels:
        completed = level.get("completed") or 0
        server = level.get("server") or {}
        running = (server.get("num_requests_running") or {}).get("mean")
        waiting = (server.get("num_requests_waiting") or {}).get("mean") or 0.0
        measured = _level_measured(level)
        if not completed or not running or not measured:
            continue
        mean_in = (level.get("total_input_tokens") or 0) / completed
        mean_out = (level.get("total_output_tokens") or 0) / completed
        if mean_out < 2:
            continue
        batch = max(1, round(running))
        prefill = min(round(batch * mean_in / mean_out), settings.max_num_batched_tokens)
        requests_per_s = level.get("request_throughput") or 0.0
        rate = level.get("request_rate")
        points.append(
            LevelPoint(
                step_model,
                batch=batch,
                context=round(mean_in + mean_out / 2),
                prompt=max(1, round(mean_in)),
                output=round(mean_out),
                prefill_per_step=prefill,
                queue_s=waiting / requests_per_s if requests_per_s else 0.0,
                concurrency=level.get("concurrency") or None,
                request_rate=float(rate) if isinstance(rate, int | float) else None,
                measured=measured,
            )
        )
    return points


def _errors(points: Sequence[LevelPoint], efficiency: Efficiency) -> dict[str, list[float]]:
    errors: dict[str, list[float]] = {metric: [] for metric in METRICS}
    for point in points:
        for metric, value in point.predicted(efficiency).items():
            errors[metric].append(abs(value / point.measured[metric] - 1))
    return errors


def _mean_pct(values: Sequence[float]) -> float:
    return 100 * math.fsum(values) / len(values) if values else 0.0


def calibrate(
    points: Sequence[LevelPoint], prior: Efficiency = DEFAULT_EFFICIENCY
) -> Calibration | None:
    """Constants fitted to ``points`` starting from ``prior`` (module docstring); None when
    there are too few points or the fit does not improve on the prior."""
    if len(points) < MIN_POINTS:
        return None
    names = fitted_names()
    bounds = [FITTED[name] for name in names]
    lower = np.array([bound.low for bound in bounds])
    upper = np.array([bound.high for bound in bounds])
    start = np.clip([getattr(prior, name) for name in names], lower, upper)
    base = dataclasses.asdict(prior)

    def efficiency_at(x: np.ndarray) -> Efficiency:
        fitted = {name: float(value) for name, value in zip(names, x, strict=True)}
        return Efficiency.from_constants({**base, **fitted})

    def residuals(x: np.ndarray) -> np.ndarray:
        efficiency = efficiency_at(x)
        fit = [
            math.log(value / point.measured[metric])
            for point in points
            for metric, value in point.predicted(efficiency).items()
        ]
        held = []
        for bound, value, initial in zip(bounds, x, start, strict=True):
            if bound.additive_scale is not None:
                held.append(PRIOR_WEIGHT * (value - initial) / bound.additive_scale)
            else:
                held.append(PRIOR_WEIGHT * math.log(value / initial))
        return np.array(fit + held)

    solution = least_squares(
        residuals, start, bounds=(lower, upper), x_scale="jac", loss="soft_l1", f_scale=ROBUST_SCALE
    )
    fitted = efficiency_at(solution.x)
    before, after = _errors(points, prior), _errors(points, fitted)
    overall_before = _mean_pct([e for values in before.values() for e in values])
    overall_after = _mean_pct([e for values in after.values() for e in values])
    if not overall_after < overall_before:
        return None
    metrics = {
        metric: MetricError(
            len(before[metric]), _mean_pct(before[metric]), _mean_pct(after[metric])
        )
        for metric in METRICS
        if before[metric]
    }
    return Calibration(fitted, len(points), overall_before, overall_after, metrics)
