"""Search strategies: which configurations of a serve grid to measure, how long, and which
one wins — for a fraction of the GPU time an exhaustive run spends.

Guarantees:

- Every strategy works on ``Trials`` (predict on the simulator: free; measure for real:
  spends GPU seconds, a cold start each time) and returns a ``SearchResult`` holding every
  configuration's fate (pruned with its predicted value, eliminated in round k with its
  measured value, measured, winner, or never reached), the GPU seconds spent, and the
  winner: the configuration with the highest measured value (``outcomes``) at full effort.
  Predicted figures never decide a winner; they only decide what is measured.
- ``spend_limit_s`` and ``max_trials`` are never knowingly passed: a measurement starts
  only when its estimated GPU seconds (its prediction at that effort, or the mean of
  measurements so far) fit in what is left, and only while fewer than ``max_trials``
  configurations were measured.
- ``exhaustive`` measures every configuration in full. ``prune`` predicts every
  configuration, drops those vLLM would refuse, that meet the SLOs at no load, that lose
  to the predicted best by more than ``margin``, or that are predicted exactly the same as
  another survivor (the flags that tell them apart do not bind at this workload: one of them
  is measured); measures the survivors best first, and after ``calibrate_after``
  measurements fits the simulator to them (``calibration``) and re-ranks what is left with
  the calibrated model (which may also bring back a configuration the first screen dropped)
  — a calibration is used only when it predicts the configurations already measured better
  than the defaults did. After each measurement, a configuration whose prediction, scaled
  by how the measurements so far compare with their predictions, falls more than
  ``measured_margin`` below the best value measured is dropped. ``halving`` measures every
  candidate briefly, keeps the best 1/``eta``, measures those longer, and so on up to full
  effort; the last two are compared by their 95 % intervals (``SearchResult.decided``).
  ``bayes`` lets Optuna's TPE sampler (seeded) pick configurations over the grid's flags,
  each measured in full.
  ``prune+halving`` runs halving on prune's survivors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from agents.hardware import DEFAULT_EFFICIENCY, Efficiency
from agents.search.calibration import Calibration
from agents.search.outcomes import Outcome

Strategy = Literal["exhaustive", "prune", "halving", "bayes", "prune+halving"]
STRATEGIES: tuple[Strategy, ...] = ("exhaustive", "prune", "halving", "bayes", "prune+halving")
FULL_EFFORT = 1.0

FateName = Literal["winner", "measured", "eliminated", "pruned", "not_reached"]


class SearchStopped(Exception):
    """Raised by ``Trials.measure`` when the run is stopping (a cancel, the deadline): the
    search ends there, with what it measured so far (``stopped_by`` "stop")."""


class Trials(Protocol):
    """Where a search gets its figures from, for the configurations it was given (by index)."""

    def predict(self, index: int, efficiency: Efficiency) -> Outcome:
        """The simulator's outcome of configuration ``index`` (free)."""

    def measure(self, index: int, effort: float) -> Outcome:
        """Configuration ``index`` measured for real at ``effort`` (1: the experiment's full
        workload; less: fewer requests and capacity probes): spends its ``gpu_seconds``.
        Raises ``SearchStopped`` when the run is stopping."""

    def calibrate(self, measured: Sequence[tuple[int, Outcome]]) -> Calibration | None:
        """The simulator fitted to these measurements, or None (too few points)."""


@dataclass(frozen=True)
class SearchSpec:
    """How to search: the strategy and its limits (``spend_limit_s``: GPU seconds,
    ``max_trials``: configurations measured; None: no limit), prune's ``margin`` (a share of
    the predicted best), halving's ``eta`` and first-round ``min_effort``, when prune
    calibrates, the seed of bayes' sampler, and the constants predictions start from
    (``prior``: an earlier calibration's; what the fates' ``predicted`` figures use)."""

    strategy: Strategy = "exhaustive"
    spend_limit_s: float | None = None
    max_trials: int | None = None
    margin: float = 0.25
    measured_margin: float = 0.10
    eta: int = 3
    min_effort: float = 0.25
    calibrate_after: int = 2
    seed: int = 0
    # The constants predictions start from: an earlier calibration's, or the defaults.
    prior: Efficiency = DEFAULT_EFFICIENCY


@dataclass
class Fate:
    """What became of one configuration."""

    fate: FateName = "not_reached"
    round: int | None = None
    predicted: float | None = None
    calibrated: float | None = None
    measured: float | None = None
    effort: float | None = None
    reason: str = ""


@dataclass
class SearchResult:
    """The search's answer (module docstring). ``decided``: False when the winner's 95 %
    interval overlaps the runner-up's (the two are within noise of each other)."""

    strategy: Strategy
    fates: list[Fate]
    winner: int | None = None
    decided: bool = True
    spent_gpu_s: float = 0.0
    measurements: int = 0
    calibration: Calibration | None = None
    # A calibration fitted but not used: it predicted the measured configurations worse.
    calibration_rejected: Calibration | None = None
    stopped_by: str | None = None
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    # The prediction error (mean absolute %, value) of the configurations measured after a
    # calibration: with the simulator's default constants and with the calibrated ones.
    error_uncalibrated_pct: float | None = None
    error_calibrated_pct: float | None = None


class _Ledger:
    """What a search spent and may still spend."""

    def __init__(
        self, trials: Trials, spec: SearchSpec, count: int, names: Sequence[str] | None = None
    ):
        self.trials = trials
        self.spec = spec
        # How reasons name a configuration (a run names its trials).
        self.names = (
            list(names) if names is not None else [f"configuration {i + 1}" for i in range(count)]
        )
        self.result = SearchResult(spec.strategy, [Fate() for _ in range(count)])
        self.measured_configs: set[int] = set()
        # GPU seconds per unit of effort: each configuration's prediction, and what the
        # measurements so far took.
        self.predicted_seconds: dict[int, float] = {}
        self.spends: list[float] = []
        # The effort each configuration was last measured at, and its value then.
        self.last: dict[int, tuple[float, float]] = {}

    def estimate(self, index: int, effort: float) -> float:
        """The GPU seconds measuring ``index`` at ``effort`` should take."""
        if index in self.predicted_seconds:
            return self.predicted_seconds[index] * effort
        return effort * sum(self.spends) / len(self.spends) if self.spends else 0.0

    def can_measure(self, index: int, effort: float) -> bool:
        spec, result = self.spec, self.result
        if (
            spec.max_trials is not None
            and index not in self.measured_configs
            and len(self.measured_configs) >= spec.max_trials
        ):
            result.stopped_by = "max_trials"
            return False
        if (
            spec.spend_limit_s is not None
            and result.spent_gpu_s + self.estimate(index, effort) > spec.spend_limit_s
        ):
            result.stopped_by = "spend_limit"
            return False
        return True

    def measure(self, index: int, effort: float, round_: int | None = None) -> Outcome:
        outcome = self.trials.measure(index, effort)
        self.result.spent_gpu_s += outcome.gpu_seconds
        self.result.measurements += 1
        self.spends.append(outcome.gpu_seconds / max(effort, 1e-9))
        self.measured_configs.add(index)
        fate = self.result.fates[index]
        fate.measured, fate.effort, fate.round = outcome.value, effort, round_
        fate.fate = "measured"
        if effort >= FULL_EFFORT:
            self.result.outcomes[index] = outcome
        self.last[index] = (effort, _value(outcome))
        return outcome


def _value(outcome: Outcome | None) -> float:
    """A sortable value: configurations that cannot serve sort last."""
    return outcome.value if outcome is not None and outcome.serves else -math.inf


def _declare(ledger: _Ledger) -> SearchResult:
    """The winner: the best value measured at full effort (never a prediction)."""
    result = ledger.result
    ranked = sorted(
        (i for i, o in result.outcomes.items() if o.serves),
        key=lambda i: -_value(result.outcomes[i]),
    )
    if ranked:
        result.winner = ranked[0]
        result.fates[ranked[0]].fate = "winner"
        if len(ranked) > 1:
            best, second = result.outcomes[ranked[0]], result.outcomes[ranked[1]]
            if best.low is not None and second.high is not None:
                result.decided = best.low > second.high
    return result


# -- strategies ------------------------------------------------------------------------------


def _exhaustive(ledger: _Ledger, candidates: Sequence[int]) -> None:
    for index in candidates:
        if not ledger.can_measure(index, FULL_EFFORT):
            break
        ledger.measure(index, FULL_EFFORT)


def _screen(ledger: _Ledger, candidates: Sequence[int], efficiency: Efficiency) -> list[int]:
    """Prune's screen: predicts each candidate; returns the survivors, best predicted first,
    and marks the others pruned with their reason."""
    predictions = {index: ledger.trials.predict(index, efficiency) for index in candidates}
    for index, outcome in predictions.items():
        ledger.predicted_seconds[index] = outcome.gpu_seconds
        ledger.result.fates[index].predicted = outcome.value
    serving = [i for i in candidates if predictions[i].serves]
    best = max((_value(predictions[i]) for i in serving), default=None)
    survivors: list[int] = []
    for index in candidates:
        outcome, fate = predictions[index], ledger.result.fates[index]
        twin = next((i for i in survivors if _same(predictions[i], outcome)), None)
        if not outcome.starts:
            fate.fate, fate.reason = "pruned", "predicted not to start"
        elif outcome.value is None:
            fate.fate, fate.reason = "pruned", "predicted to meet the SLOs at no load"
        elif best is not None and outcome.value < best * (1 - ledger.spec.margin):
            fate.fate = "pruned"
            fate.reason = f"predicted {100 * (1 - outcome.value / best):.0f} % below the best"
        elif twin is not None:
            fate.fate = "pruned"
            fate.reason = f"predicted the same as {ledger.names[twin]}"
        else:
            survivors.append(index)
    return sorted(survivors, key=lambda i: -_value(predictions[i]))


def _same(a: Outcome, b: Outcome) -> bool:
    """Two predictions the simulator cannot tell apart: the same capacity and value, and the
    same throughput at every level they ran (a capacity that merely lands on the same load,
    as a max_num_seqs cap can, differs in the levels beyond it)."""
    if a.value is None or b.value is None or a.load != b.load:
        return False
    if not math.isclose(a.value, b.value, rel_tol=1e-3) or len(a.levels) != len(b.levels):
        return False
    return all(
        _level_load(x) == _level_load(y)
        and math.isclose(
            x.get("output_throughput") or 0, y.get("output_throughput") or 0, rel_tol=1e-3
        )
        for x, y in zip(a.levels, b.levels, strict=True)
    )


def _level_load(level: Mapping) -> object:
    return level.get("concurrency", level.get("request_rate"))


def _prune(ledger: _Ledger, candidates: Sequence[int]) -> None:
    spec, trials, result = ledger.spec, ledger.trials, ledger.result
    queue = _screen(ledger, candidates, spec.prior)
    measured: list[tuple[int, Outcome]] = []
    calibrated_errors: list[tuple[float, float]] = []
    while queue:
        index = queue.pop(0)
        if not ledger.can_measure(index, FULL_EFFORT):
            break
        outcome = ledger.measure(index, FULL_EFFORT)
        measured.append((index, outcome))
        fate = result.fates[index]
        if fate.calibrated is not None and outcome.serves and fate.predicted is not None:
            calibrated_errors.append(
                (
                    abs(fate.predicted / outcome.value - 1),
                    abs(fate.calibrated / outcome.value - 1),
                )
            )
        if (
            len(measured) == spec.calibrate_after
            and result.calibration is None
            and result.calibration_rejected is None
        ):
            calibration = trials.calibrate(measured)
            if calibration is not None and _predicts_better(ledger, measured, calibration):
                result.calibration = calibration
                queue = _rerank(ledger, candidates, measured, calibration.efficiency)
            elif calibration is not None:
                result.calibration_rejected = calibration
        queue = _drop_behind(ledger, queue, measured)
    if calibrated_errors:
        result.error_uncalibrated_pct = (
            100 * sum(e[0] for e in calibrated_errors) / len(calibrated_errors)
        )
        result.error_calibrated_pct = (
            100 * sum(e[1] for e in calibrated_errors) / len(calibrated_errors)
        )


def _used_prediction(fate: Fate) -> float | None:
    return fate.calibrated if fate.calibrated is not None else fate.predicted


def _predicts_better(
    ledger: _Ledger, measured: Sequence[tuple[int, Outcome]], calibration: Calibration
) -> bool:
    """Whether the calibrated simulator predicts the configurations measured so far closer
    to what they measured than the defaults did (mean absolute error of the value)."""
    before = after = 0.0
    count = 0
    for index, outcome in measured:
        default = ledger.result.fates[index].predicted
        if not outcome.serves or default is None:
            continue
        calibrated = ledger.trials.predict(index, calibration.efficiency).value
        if calibrated is None:
            return False
        before += abs(default / outcome.value - 1)
        after += abs(calibrated / outcome.value - 1)
        count += 1
    return count > 0 and after < before


def _drop_behind(
    ledger: _Ledger, queue: list[int], measured: Sequence[tuple[int, Outcome]]
) -> list[int]:
    """The queue less what cannot catch up with the best measured value: each prediction is
    scaled by the median of measured ÷ predicted so far, then compared."""
    fates = ledger.result.fates
    ratios = sorted(
        outcome.value / used
        for index, outcome in measured
        if outcome.serves and (used := _used_prediction(fates[index]))
    )
    best = max((_value(outcome) for _, outcome in measured), default=-math.inf)
    if not ratios or best <= 0:
        return queue
    ratio = ratios[len(ratios) // 2]
    kept = []
    for index in queue:
        used = _used_prediction(fates[index])
        if used is not None and used * ratio < best * (1 - ledger.spec.measured_margin):
            fates[index].fate = "pruned"
            fates[index].reason = (
                f"predicted {100 * (1 - used * ratio / best):.0f} % below the best measured "
                "(its prediction scaled by the measurements so far)"
            )
        else:
            kept.append(index)
    return kept


def _rerank(
    ledger: _Ledger,
    candidates: Sequence[int],
    measured: Sequence[tuple[int, Outcome]],
    efficiency: Efficiency,
) -> list[int]:
    """After a calibration: every configuration not measured yet is predicted again with the
    calibrated simulator and screened against the best known value (measured or predicted);
    of configurations predicted the same, one is kept."""
    done = {index for index, _ in measured}
    left = [i for i in candidates if i not in done]
    predictions = {index: ledger.trials.predict(index, efficiency) for index in left}
    best_measured = max((_value(o) for _, o in measured), default=-math.inf)
    best = max([best_measured, *(_value(o) for o in predictions.values())])
    queue: list[int] = []
    for index in left:
        outcome, fate = predictions[index], ledger.result.fates[index]
        fate.calibrated = outcome.value
        ledger.predicted_seconds[index] = outcome.gpu_seconds
        twin = next((i for i in queue if _same(predictions[i], outcome)), None)
        if (
            outcome.serves
            and best > 0
            and outcome.value >= best * (1 - ledger.spec.margin)
            and twin is None
        ):
            queue.append(index)
            if fate.fate == "pruned":
                fate.fate, fate.reason = "not_reached", "brought back by the calibration"
        elif fate.fate != "pruned":
            fate.fate = "pruned"
            fate.reason = (
                f"calibrated, predicted the same as {ledger.names[twin]}"
                if twin is not None
                else "calibrated prediction below the best"
            )
    return sorted(queue, key=lambda i: -_value(predictions[i]))


def _halving(ledger: _Ledger, candidates: Sequence[int]) -> None:
    spec, result = ledger.spec, ledger.result
    alive = list(candidates)
    rounds = max(1, math.ceil(math.log(max(len(alive), 2) / 2, spec.eta)) + 1)
    for round_ in range(1, rounds + 1):
        last = round_ == rounds or len(alive) <= 2
        effort = (
            FULL_EFFORT
            if last
            else max(spec.min_effort, FULL_EFFORT / spec.eta ** (rounds - round_))
        )
        scores: dict[int, float] = {}
        for index in alive:
            earlier = ledger.last.get(index)
            if earlier is not None and earlier[0] >= effort:
                scores[index] = earlier[1]  # measured at this effort already: not again
                continue
            if not ledger.can_measure(index, effort):
                return
            scores[index] = _value(ledger.measure(index, effort, round_))
        if last:
            return
        ranked = sorted(alive, key=lambda i: -scores[i])
        keep = max(2, math.ceil(len(alive) / spec.eta))
        # What met no SLO in this round goes too (unless nothing did: the best look stays).
        kept = [i for i in ranked[:keep] if scores[i] > -math.inf] or ranked[:1]
        for index in ranked:
            if index not in kept:
                fate = result.fates[index]
                fate.fate, fate.reason = "eliminated", f"round {round_} of {rounds}"
                fate.round = round_
        alive = kept


def _bayes(ledger: _Ledger, candidates: Sequence[int], flags_of: Callable[[int], Mapping]):
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices: dict[str, list] = {}
    for index in candidates:
        for name, value in flags_of(index).items():
            if value not in choices.setdefault(name, []):
                choices[name].append(value)
    by_key = {_key(flags_of(i), choices): i for i in candidates}
    sampler = optuna.samplers.TPESampler(seed=ledger.spec.seed, n_startup_trials=4)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    seen: dict[int, float] = {}
    # TPE may propose a configuration already measured, or one outside the grid's
    # combinations (a grid is a product, so it cannot here): those cost nothing.
    for _ in range(20 * len(candidates)):
        if len(seen) == len(candidates):
            break
        trial = study.ask()
        picked = {
            name: values[trial.suggest_categorical(name, list(range(len(values))))]
            for name, values in choices.items()
        }
        index = by_key.get(_key(picked, choices))
        if index is None:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            continue
        if index not in seen:
            if not ledger.can_measure(index, FULL_EFFORT):
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                break
            value = _value(ledger.measure(index, FULL_EFFORT))
            seen[index] = 0.0 if value == -math.inf else value
        study.tell(trial, seen[index])


def _key(flags: Mapping, choices: Mapping[str, list]) -> tuple:
    return tuple(choices[name].index(flags[name]) if name in flags else -1 for name in choices)


def run_search(
    spec: SearchSpec,
    configs: Sequence[Mapping[str, object]],
    trials: Trials,
    names: Sequence[str] | None = None,
) -> SearchResult:
    """Searches ``configs`` (serve flags, one per configuration) with ``spec``'s strategy
    (module docstring); ``names``: how the fates' reasons name each configuration (default
    "configuration 1", "configuration 2" …)."""
    ledger = _Ledger(trials, spec, len(configs), names)
    everything = list(range(len(configs)))
    try:
        if spec.strategy == "exhaustive":
            _exhaustive(ledger, everything)
        elif spec.strategy == "prune":
            _prune(ledger, everything)
        elif spec.strategy == "halving":
            _halving(ledger, everything)
        elif spec.strategy == "prune+halving":
            _halving(ledger, _screen(ledger, everything, spec.prior))
        elif spec.strategy == "bayes":
            _bayes(ledger, everything, lambda i: configs[i])
        else:
            raise ValueError(f"unknown search strategy {spec.strategy!r}")
    except SearchStopped:
        ledger.result.stopped_by = "stop"
    return _declare(ledger)
