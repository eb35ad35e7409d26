"""A run that searches its grid (a job with ``search``; docs/search.md): ``agents.search``
decides which trials to measure, and how long, with the simulator's predictions and the
measurements so far; the runner measures them on the real engine.

Guarantees:

- A trial measured in full is reported exactly as in a run without a search (its
  ``trial_started``, cold start, levels and ``trial_finished``). A brief look (halving's
  early rounds, effort < 1) is not: its levels are not the workload's, so they are not stored
  as measurements; what it found is its fate's ``measured`` figure and ``round``.
- Every trial of the job ends reported: a trial the search did not measure in full gets a
  ``trial_finished`` ``skipped`` whose log line says its fate (pruned and why, eliminated in
  round k with its figure, not reached and what stopped the search).
- ``search_finished`` follows, before ``run_finished``: every trial's fate, the winner, the
  pod seconds spent measuring (each measurement's cold start and levels, brief looks
  included) and, where every trial was predicted, what measuring all of them would take.
- Predictions use the job's model facts and the simulator's profile of the job's GPU; a job
  whose GPU the simulator does not know cannot be pruned and is measured as the strategy
  goes without predictions (``prune``: every trial; the site refuses such a search for a
  GPU type the simulator lacks, so only a fallback placement can land here).
- A stop (cancel, deadline) ends the search at once: what was measured stands.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from agents import protocol
from agents.hardware import (
    DEFAULT_EFFICIENCY,
    Efficiency,
    GpuProfile,
    gpu_profile,
)
from agents.predict import predict_workload
from agents.search import (
    Calibration,
    Outcome,
    SearchResult,
    SearchSpec,
    SearchStopped,
    calibrate,
    level_points,
    outcome_of,
    run_search,
)

logger = logging.getLogger(__name__)

# Failure classes that mean the configuration never served: a search reads them as "does
# not start" (the simulator's refusals), not as a measured failure.
_DID_NOT_START = frozenset({"oom_at_startup", "kv_cache_too_small", "unsupported_flag"})


@dataclass
class TrialRecord:
    """What one measurement of a trial found, as the search reads it: its levels (with the
    server's figures, in the simulator's own time), capacity, cold start and end."""

    levels: list[dict] = field(default_factory=list)
    capacity: dict | None = None
    cold_start_s: float = 0.0
    outcome: str = ""
    failure_class: str | None = None

    def gpu_seconds(self) -> float:
        """The pod's time this measurement took: its cold start and its levels."""
        return self.cold_start_s + sum(float(level.get("duration") or 0) for level in self.levels)


class RunnerTrials:
    """``agents.search.Trials`` for a ``JobRunner``'s job: predictions on the simulator (in
    the search's thread), measurements on the runner's engine (on the runner's loop)."""

    def __init__(self, runner, loop: asyncio.AbstractEventLoop):
        self.runner = runner
        self.loop = loop
        job = runner.job
        self.configs = [trial.serve_config for trial in job.trials]
        self.model = job.model.facts()
        self.gpu: GpuProfile | None
        try:
            self.gpu = gpu_profile(job.engine.gpu_type)
        except ValueError:
            self.gpu = None
        dataset = getattr(job.workload.dataset, "dataset_id", None)
        self.dataset_path = (
            runner.dataset_path(str(dataset)) if dataset and runner.dataset_path else None
        )
        self._predictions: dict[tuple[int, Efficiency], Outcome] = {}
        self.prior = prior_efficiency(job.search) if job.search else DEFAULT_EFFICIENCY

    def predict(self, index: int, efficiency: Efficiency) -> Outcome:
        key = (index, efficiency)
        if key not in self._predictions:
            assert self.gpu is not None, "predictions need the simulator's profile of the GPU"
            prediction = predict_workload(
                self.model,
                self.gpu,
                self.configs[index],
                self.runner.job.workload,
                self.runner.job.slos,
                dataset_path=self.dataset_path,
                efficiency=efficiency,
                vllm_version=self.runner.job.engine.vllm_version,
            )
            self._predictions[key] = outcome_of(
                prediction.levels,
                prediction.capacity,
                gpu_seconds=prediction.gpu_seconds,
                starts=prediction.starts,
                simulated=True,
            )
        return self._predictions[key]

    def exhaustive_seconds(self) -> float | None:
        """What measuring every trial would take, by the search's first prediction of each
        (``prior``); None unless every trial was predicted (prune does; halving and bayes do
        not)."""
        predicted = [self._predictions.get((i, self.prior)) for i in range(len(self.configs))]
        if any(outcome is None for outcome in predicted):
            return None
        return sum(outcome.gpu_seconds for outcome in predicted)

    def measure(self, index: int, effort: float) -> Outcome:
        if self.runner.stop_requested:
            raise SearchStopped
        trial = self.runner.job.trials[index]
        future = asyncio.run_coroutine_threadsafe(
            self.runner.measure_trial(trial, effort), self.loop
        )
        record: TrialRecord = future.result()
        if self.runner.stop_requested and record.outcome != "succeeded":
            raise SearchStopped
        started = record.failure_class not in _DID_NOT_START
        capacity = record.capacity if record.outcome == "succeeded" else None
        return outcome_of(record.levels, capacity, gpu_seconds=record.gpu_seconds(), starts=started)

    def calibrate(self, measured: Sequence[tuple[int, Outcome]]) -> Calibration | None:
        if self.gpu is None:
            return None
        points = [
            point
            for index, outcome in measured
            for point in level_points(self.model, self.gpu, self.configs[index], outcome.levels)
        ]
        return calibrate(points, self.prior)


def prior_efficiency(settings: protocol.SearchSettings) -> Efficiency:
    """The constants the job's predictions start from: its prior calibration's, else the
    simulator's defaults (a constant this agent does not know is left out)."""
    if settings.prior is None:
        return DEFAULT_EFFICIENCY
    return Efficiency.from_constants(settings.prior.constants)


def search_spec(settings: protocol.SearchSettings, *, can_predict: bool) -> SearchSpec:
    """The strategies' spec for a job's search settings; without predictions, prune's
    screen cannot run: every trial is its candidate (``exhaustive``, ``halving``)."""
    strategy = settings.strategy
    if not can_predict:
        strategy = {"prune": "exhaustive", "prune+halving": "halving"}.get(strategy, strategy)
    return SearchSpec(
        strategy=strategy,
        spend_limit_s=settings.spend_limit_seconds,
        max_trials=settings.max_trials,
        margin=settings.margin,
        prior=prior_efficiency(settings),
    )


async def run_job_search(runner) -> dict[str, int]:
    """Runs the job's search (module docstring) on ``runner``; returns the count of trials
    succeeded, failed and skipped, as ``JobRunner.run`` reports them."""
    loop = asyncio.get_running_loop()
    trials = RunnerTrials(runner, loop)
    if trials.gpu is None and runner.job.search.strategy in ("prune", "prune+halving"):
        logger.warning(
            "the simulator has no profile of %s: the search cannot prune",
            runner.job.engine.gpu_type,
        )
    spec = search_spec(runner.job.search, can_predict=trials.gpu is not None)
    names = [f"trial {trial.index}" for trial in runner.job.trials]
    result = await asyncio.to_thread(run_search, spec, trials.configs, trials, names)
    counts = {"succeeded": 0, "failed": 0, "skipped": 0}
    # The search numbers the job's trials by position; messages name them by their index.
    for position, trial in enumerate(runner.job.trials):
        ended = runner.reported_outcome(trial.index)
        if ended is None:
            runner.skip_trial(trial.index, _skip_reason(result, position))
            ended = "skipped"
        counts[ended] += 1
    report = search_report(result, trials, [trial.index for trial in runner.job.trials])
    prior = runner.job.search.prior
    report["prior_run"] = str(prior.run_id) if prior is not None else None
    runner.emit(protocol.SearchFinished, **report)
    return counts


def _skip_reason(result: SearchResult, position: int) -> str:
    fate = result.fates[position]
    if fate.fate == "pruned":
        return f"pruned by the search: {fate.reason}"
    if fate.fate == "eliminated":
        return f"eliminated by the search in {fate.reason} (measured briefly)"
    stopped = {"spend_limit": "its spend limit", "max_trials": "its maximum of trials"}
    return "not reached: the search " + (
        f"stopped at {stopped[result.stopped_by]}"
        if result.stopped_by in stopped
        else "was stopped"
        if result.stopped_by == "stop"
        else "ended before it"
    )


def search_report(result: SearchResult, trials: RunnerTrials, indices: Sequence[int]) -> dict:
    """``search_finished``'s fields for ``result``, whose trials are the job's ``indices``
    by position."""
    fates = [
        {
            "trial": indices[position],
            "fate": fate.fate,
            "round": fate.round,
            "predicted": fate.predicted,
            "calibrated": fate.calibrated,
            "measured": fate.measured,
            "effort": fate.effort,
            "reason": fate.reason[:500],
        }
        for position, fate in enumerate(result.fates)
    ]
    return {
        "strategy": result.strategy,
        "fates": fates,
        "winner": None if result.winner is None else indices[result.winner],
        "decided": result.decided,
        "measurements": result.measurements,
        "spent_seconds": result.spent_gpu_s,
        "exhaustive_seconds": trials.exhaustive_seconds(),
        "stopped_by": result.stopped_by,
        "calibration": _calibration_report(result),
    }


def _calibration_report(result: SearchResult) -> dict | None:
    calibration, used = result.calibration, True
    if calibration is None:
        calibration, used = result.calibration_rejected, False
    if calibration is None:
        return None
    constants: Mapping[str, float] = dataclasses.asdict(calibration.efficiency)
    return {
        "constants": dict(constants),
        "used": used,
        "fit_error_pct": calibration.error_after_pct,
        "error_uncalibrated_pct": result.error_uncalibrated_pct,
        "error_calibrated_pct": result.error_calibrated_pct,
    }
