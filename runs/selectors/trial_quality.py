"""Each configuration's quality beside its speed (issue 38, docs/quality.md): its score on
the run's evaluation with the 95 % interval, and its label-free drift from the run's
reference configuration.

Guarantees:

- ``run_quality`` gives, for a run whose job has an evaluation, every trial's quality by
  index: its score and interval from its stored ``TrialEvaluation``, or a note saying why
  there is none — ``quality not judged: simulated`` for every trial of a simulated run (the
  simulator serves no text), ``not scored yet`` otherwise. A run without an evaluation gets
  nothing.
- Drift compares a trial's answers with the reference trial's on the items both answered
  (``agents.evaluation.drift``: the share changed with its Wilson interval, and where both
  were scored the mean score difference with its paired interval), answers being compared
  by the digest of their whole text. The reference is ``reference_trial``'s.
- ``quality_floor_exclusions`` applies an experiment's quality floor to the candidates'
  scores: absolute (``min_score``: score ≥ it) or relative (``max_points_below_best``:
  score ≥ the best candidate's score − N points, a point being a percentage point of the
  0–1 score, 0.01) or model-relative (``max_points_below_best_model``: score ≥ the best
  model's score on the same evaluation − N points, the best as
  ``runs.selectors.model_floor`` reads it and the caller passes it; none read: nothing is
  excluded). A candidate without a score is never excluded: it is "quality not
  judged" and says why. ``quality_floor_standings`` words each candidate's standing: the
  one rule the run's answer, the reports and promotions hold configurations to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from agents.evaluation import Answer, Interval, drift
from runs.models import Run, Trial, TrialEvaluation
from runs.run_as_started import run_is_simulated

SIMULATED_NOTE = "quality not judged: simulated"
MEETS_FLOOR = "meets the quality floor"
PENDING_NOTE = "not scored yet"
NOT_JUDGED = "quality not judged"
# The floor measured from the best model's score on the same evaluation (not the run's).
MODEL_FLOOR = "max_points_below_best_model"
# Scores are floats from sums of item scores: a score exactly at the floor meets it.
_FLOOR_TOLERANCE = 1e-9
# A trial serves the model's own weights and KV cache at 16 bits unless one of these says
# otherwise (vLLM's defaults for a BF16 checkpoint).
_FULL_PRECISION = {
    "dtype": {"auto", "bfloat16", "bf16"},
    "kv_cache_dtype": {"auto", "bfloat16"},
}
_QUANTIZING_FLAGS = ("quantization",)


def _interval(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [interval.value, interval.low, interval.high]


@dataclass(frozen=True)
class TrialQuality:
    """One trial's score (None: not scored, ``note`` says why), its interval and counts, and
    its drift from the reference trial (None for the reference itself, or without one)."""

    trial: int
    score: float | None = None
    low: float | None = None
    high: float | None = None
    scored: int = 0
    items: int = 0
    failed: int = 0
    seconds: float = 0.0
    note: str = ""
    drift: dict | None = None

    def as_json(self) -> dict:
        """The quality as the API, the CLI and the pages read it."""
        return dict(vars(self))


def reference_trial(trials: Iterable[Trial]) -> Trial | None:
    """The trial every other is compared with: vLLM's defaults (the trial whose serve
    configuration is empty), else the first trial at full precision (no ``quantization``,
    the model's own dtype or BF16, a 16-bit KV cache); None when no trial is either."""
    ordered = sorted(trials, key=lambda trial: trial.index)
    defaults = next((trial for trial in ordered if trial.serve_config == {}), None)
    if defaults is not None:
        return defaults
    return next((trial for trial in ordered if _full_precision(trial.serve_config)), None)


def _full_precision(config: dict) -> bool:
    if any(config.get(flag) not in (None, "") for flag in _QUANTIZING_FLAGS):
        return False
    return all(config.get(flag, "auto") in allowed for flag, allowed in _FULL_PRECISION.items())


def _answers(evaluation: TrialEvaluation) -> dict[str, Answer]:
    return {
        item_id: Answer(outcome["output_sha256"], outcome.get("score"))
        for item_id, outcome in evaluation.outcomes.items()
        if outcome.get("output_sha256")
    }


def drift_json(
    reference: Mapping[str, Answer], candidate: Mapping[str, Answer], index: int
) -> dict:
    """``candidate``'s drift from ``reference`` (trial ``index``'s answers) as the API, the
    CLI and the pages read it: compared, changed (a count), the changed share's interval,
    missing, and the score difference's interval."""
    found = drift(reference, candidate)
    return {
        "reference_trial": index,
        "compared": found.compared,
        "changed": len(found.changed),
        "changed_share": _interval(found.changed_share),
        "missing": found.missing,
        "score_difference": _interval(found.score_difference),
    }


def run_quality(*, run: Run, trials: list[Trial] | None = None) -> dict[int, TrialQuality]:
    """Every trial's quality, by index (module docstring); ``trials``: the run's, when the
    caller has them."""
    if not run.job_spec.get("evaluation"):
        return {}
    trials = list(run.trials.all()) if trials is None else trials
    if run_is_simulated(run):
        return {trial.index: TrialQuality(trial.index, note=SIMULATED_NOTE) for trial in trials}
    stored = {
        evaluation.trial_id: evaluation
        for evaluation in TrialEvaluation.objects.filter(
            organization_id=run.organization_id, trial__in=[t.id for t in trials]
        )
    }
    reference = reference_trial(trial for trial in trials if trial.id in stored)
    qualities = {}
    for trial in trials:
        evaluation = stored.get(trial.id)
        if evaluation is None:
            qualities[trial.index] = TrialQuality(trial.index, note=PENDING_NOTE)
            continue
        compared = reference is not None and reference.id != trial.id
        qualities[trial.index] = TrialQuality(
            trial=trial.index,
            score=evaluation.score,
            low=evaluation.score_low,
            high=evaluation.score_high,
            scored=evaluation.scored,
            items=evaluation.items,
            failed=evaluation.failed,
            seconds=evaluation.seconds,
            drift=drift_json(_answers(stored[reference.id]), _answers(evaluation), reference.index)
            if compared
            else None,
        )
    return qualities


def unjudged_note(quality: dict | None) -> str:
    """Why a configuration's quality cannot be held against a floor: ``quality not judged:
    simulated`` or ``quality not judged: not scored yet``."""
    note = (quality or {}).get("note") or PENDING_NOTE
    return note if note.startswith(NOT_JUDGED) else f"{NOT_JUDGED}: {note}"


def _percent(score: float) -> str:
    return f"{score * 100:.1f} %"


@dataclass(frozen=True)
class ModelBest:
    """The best measured score on one evaluation among comparable experiments' configurations
    (``runs.selectors.model_floor``) and the model that scored it."""

    score: float
    model: str


def is_model_floor(floor: dict | None) -> bool:
    """Whether ``floor`` is measured from the best model's score (``MODEL_FLOOR``)."""
    return bool(floor) and floor.get(MODEL_FLOOR) is not None


def quality_floor_text(floor: dict) -> str:
    """The floor in words: ``a score of at least 90.0 %``, ``at most 2 points below the
    best configuration's score`` or ``at most 5 points below the best model's score on the
    same evaluation``."""
    if floor.get("min_score") is not None:
        return f"a score of at least {_percent(floor['min_score'])}"
    if is_model_floor(floor):
        return (
            f"at most {floor[MODEL_FLOOR]:g} points below the best model's score "
            "on the same evaluation"
        )
    return f"at most {floor['max_points_below_best']:g} points below the best configuration's score"


def quality_floor_exclusions(
    floor: dict | None, scores: dict[int, float | None], best_model: ModelBest | None = None
) -> dict[int, str]:
    """The candidates (trial index → score, None: not judged) that ``floor`` excludes, each
    with the reason in words; {} without a floor (module docstring). ``best_model``: the
    best model's score for a ``MODEL_FLOOR`` floor (None: none measured, none excluded)."""
    if not floor:
        return {}
    judged = {trial: score for trial, score in scores.items() if score is not None}
    if not judged:
        return {}
    if floor.get("min_score") is not None:
        least = float(floor["min_score"])
        return {
            trial: f"score {_percent(score)} is below the floor of {_percent(least)}"
            for trial, score in judged.items()
            if score < least - _FLOOR_TOLERANCE
        }
    if is_model_floor(floor):
        if best_model is None:
            return {}
        allowed = float(floor[MODEL_FLOOR])
        return {
            trial: (
                f"score {_percent(score)} is more than {allowed:g} points below the best "
                f"model's {_percent(best_model.score)} ({best_model.model})"
            )
            for trial, score in judged.items()
            if score < best_model.score - allowed / 100 - _FLOOR_TOLERANCE
        }
    allowed = float(floor["max_points_below_best"])
    best_trial = max(judged, key=lambda trial: (judged[trial], -trial))
    best = judged[best_trial]
    return {
        trial: (
            f"score {_percent(score)} is {(best - score) * 100:.1f} points below the best, "
            f"trial {best_trial} at {_percent(best)} (the floor allows {allowed:g})"
        )
        for trial, score in judged.items()
        if score < best - allowed / 100 - _FLOOR_TOLERANCE
    }


@dataclass(frozen=True)
class FloorStanding:
    """How one candidate stands against its run's quality floor: ``kept`` (ranked) or
    excluded; ``text`` as the pages and the API show it (``meets the quality floor``,
    ``excluded: <reason>``, ``quality not judged: <why>``); ``reason``: the exclusion's
    reason or why it was not judged ("" when it meets the floor)."""

    kept: bool
    judged: bool
    text: str
    reason: str = ""


def quality_floor_standings(
    floor: dict | None, candidates: dict[int, dict | None], best_model: ModelBest | None = None
) -> dict[int, FloorStanding]:
    """Each candidate (trial index → its quality as ``TrialQuality.as_json`` gives it, None:
    none) against ``floor`` by ``quality_floor_exclusions`` (``best_model`` as there); {}
    without a floor."""
    if not floor:
        return {}
    scores = {trial: (quality or {}).get("score") for trial, quality in candidates.items()}
    reasons = quality_floor_exclusions(floor, scores, best_model)
    standings = {}
    for trial, quality in candidates.items():
        if trial in reasons:
            standings[trial] = FloorStanding(
                kept=False, judged=True, text=f"excluded: {reasons[trial]}", reason=reasons[trial]
            )
        elif scores[trial] is None:
            note = unjudged_note(quality)
            standings[trial] = FloorStanding(kept=True, judged=False, text=note, reason=note)
        else:
            standings[trial] = FloorStanding(kept=True, judged=True, text=MEETS_FLOOR)
    return standings
