"""Quality in the reports (issue 38, docs/quality.md): each trial figure's score on its run's
evaluation and how it stands against its run's quality floor, for any number of figures in
a fixed number of queries.

Guarantees:

- A figure of a run with an evaluation has a quality: its stored ``TrialEvaluation``'s
  score, 95 % interval and counts, or no score and the run answer's note — ``quality not
  judged: simulated`` for a simulated figure (never a score), ``quality not judged: not
  scored yet`` for one without a stored score. A figure of a run without an evaluation has
  none.
- Each figure is held to its own run's floor, frozen when the run started, by
  ``runs.selectors.trial_quality.quality_floor_standings`` among the figures of its run
  that have a cost to rank by (a relative floor's best is that run's): the rule and the
  candidates of the run's answer wherever each candidate has a capacity at the SLOs, so a
  report ranks no configuration that its run's answer excluded for quality. Scores of
  different runs are never held against each other, except by a floor below the best model
  (``max_points_below_best_model``), whose best is the best score on the run's evaluation
  among its experiment's comparable experiments (``runs.selectors.model_floor
  .model_bests``, as the run's answer reads it).
- Each quality names its evaluation (``evaluation_key``: a built-in pack by name, an
  uploaded set by its file's digest; ``evaluation``: in words): scores on different
  evaluations are not on one scale, and the charts keep them apart.
- Only the organization's own rows are read.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runs.models import EvaluationSet, Organization, Run, TrialEvaluation
from runs.run_as_started import (
    EVALUATED_RUNS,
    EVALUATION_PACK_PATH,
    EVALUATION_SET_ID_PATH,
    EVALUATION_SET_SHA256_PATH,
    QUALITY_FLOOR_PATH,
    frozen_value,
)
from runs.selectors.model_floor import evaluation_key, model_bests
from runs.selectors.trial_quality import (
    SIMULATED_NOTE,
    FloorStanding,
    is_model_floor,
    quality_floor_standings,
    unjudged_note,
)

if TYPE_CHECKING:
    from uuid import UUID

    from runs.selectors.trial_figures import TrialFigure


@dataclass(frozen=True)
class FigureQuality:
    """One figure's score on its run's evaluation (None: not judged, ``note`` says why) and
    its standing against its run's floor (None: the run has no floor, or the figure no cost
    to rank by)."""

    evaluation_key: str  # "pack:arithmetic", "set:<sha256>"
    evaluation: str  # "pack arithmetic", "set sums"
    score: float | None = None
    low: float | None = None
    high: float | None = None
    scored: int = 0
    items: int = 0
    note: str = ""
    standing: FloorStanding | None = None

    @property
    def kept(self) -> bool:
        """Whether a report may rank it: no floor holds it, or it keeps its floor."""
        return self.standing is None or self.standing.kept

    @property
    def judged(self) -> bool:
        return self.score is not None

    @property
    def floor_text(self) -> str:
        """Its standing in words (``meets the quality floor``, ``excluded: …``, ``quality
        not judged: …``); "" without a floor."""
        return "" if self.standing is None else self.standing.text

    def score_text(self) -> str:
        """``80.0 % (95 % CI 49.0–94.3 %, n=10)``, or why it has no score."""
        if self.score is None:
            return self.note
        interval = ""
        if self.low is not None and self.high is not None:
            interval = f"95 % CI {self.low * 100:.1f}–{self.high * 100:.1f} %, "
        return f"{self.score * 100:.1f} % ({interval}n={self.scored})"

    def as_json(self) -> dict:
        """The quality as the API shows it."""
        return {
            "evaluation": self.evaluation,
            "evaluation_key": self.evaluation_key,
            "score": self.score,
            "score_ci95": None if self.low is None else [self.low, self.high],
            "scored": self.scored,
            "items": self.items,
            "note": self.note,
            "quality_floor": self.floor_text,
        }


@dataclass(frozen=True)
class _RunEvaluation:
    key: str
    label: str
    floor: dict | None


def _evaluated_runs(org: Organization) -> dict[UUID, _RunEvaluation]:
    rows = list(
        Run.objects.filter(EVALUATED_RUNS, organization=org)
        .annotate(
            frozen_pack=frozen_value(EVALUATION_PACK_PATH, text=True),
            frozen_set_id=frozen_value(EVALUATION_SET_ID_PATH, text=True),
            frozen_set_sha256=frozen_value(EVALUATION_SET_SHA256_PATH, text=True),
            frozen_floor=frozen_value(QUALITY_FLOOR_PATH),
        )
        .values_list(
            "id", "frozen_pack", "frozen_set_id", "frozen_set_sha256", "frozen_floor", named=True
        )
    )
    names = {
        str(set_id): name
        for set_id, name in EvaluationSet.objects.filter(
            organization=org, id__in={row.frozen_set_id for row in rows if row.frozen_set_id}
        ).values_list("id", "name")
    }
    runs = {}
    for row in rows:
        key = evaluation_key(row.frozen_pack, row.frozen_set_sha256) or "set:"
        if row.frozen_pack:
            label = f"pack {row.frozen_pack}"
        else:
            sha = row.frozen_set_sha256 or ""
            # A set deleted since its runs is named by its digest: the runs keep its scores.
            name = names.get(row.frozen_set_id or "")
            label = f"set {name}" if name else f"set {sha[:12]}"
        runs[row.id] = _RunEvaluation(key=key, label=label, floor=row.frozen_floor or None)
    return runs


def figures_quality(
    *, org: Organization, figures: Iterable[TrialFigure]
) -> dict[int, FigureQuality]:
    """Each figure's quality by trial id, for the figures of runs with an evaluation
    (module docstring)."""
    evaluated = _evaluated_runs(org)
    figures = [f for f in figures if f.run_id in evaluated]
    if not figures:
        return {}
    stored = {
        row[0]: row
        for row in TrialEvaluation.objects.filter(
            organization=org, trial__run_id__in=list({f.run_id for f in figures})
        ).values_list("trial_id", "score", "score_low", "score_high", "scored", "items")
    }
    qualities: dict[int, FigureQuality] = {}
    for figure in figures:
        run = evaluated[figure.run_id]
        row = stored.get(figure.trial_id)
        # The simulator serves no text: whatever was stored, its figures are not judged.
        if figure.simulated or row is None or row[1] is None:
            note = SIMULATED_NOTE if figure.simulated else unjudged_note(None)
            qualities[figure.trial_id] = FigureQuality(run.key, run.label, note=note)
            continue
        _, score, low, high, scored, items = row
        qualities[figure.trial_id] = FigureQuality(
            run.key, run.label, score=score, low=low, high=high, scored=scored, items=items
        )
    by_run: dict[UUID, list[TrialFigure]] = {}
    for figure in figures:
        if figure.ranking_usd_per_million is not None:
            by_run.setdefault(figure.run_id, []).append(figure)
    # The best models, read once for every run whose floor is measured from them.
    model_floored = {
        figures[0].experiment
        for run_id, figures in by_run.items()
        if is_model_floor(evaluated[run_id].floor)
    }
    bests = model_bests(org=org, experiments=model_floored) if model_floored else {}
    for run_id, priced in by_run.items():
        run = evaluated[run_id]
        standings = quality_floor_standings(
            run.floor,
            {f.trial_index: _as_answer_quality(qualities[f.trial_id]) for f in priced},
            bests.get((priced[0].experiment.id, run.key)),
        )
        for figure in priced:
            if figure.trial_index in standings:
                qualities[figure.trial_id] = dataclasses.replace(
                    qualities[figure.trial_id], standing=standings[figure.trial_index]
                )
    return qualities


def _as_answer_quality(quality: FigureQuality) -> dict:
    # What quality_floor_standings reads of a configuration's quality (TrialQuality.as_json).
    return {"score": quality.score, "note": quality.note}


def _money(amount) -> str | None:
    return None if amount is None else str(amount)


def figure_json(figure: TrialFigure, quality: FigureQuality | None) -> dict:
    """One trial figure as the reports' API shows it, with its quality (None: its run has
    no evaluation); money as strings, as in the run's answer."""
    return {
        "run": str(figure.run_id),
        "trial": figure.trial_index,
        "experiment": str(figure.experiment.id),
        "experiment_name": figure.experiment.name,
        "model": figure.model.name,
        "parameter_count": figure.model.parameter_count,
        "gpu_type": figure.gpu_type_id,
        "gpu_count": figure.gpu_count,
        "image_tag": figure.image_tag,
        "serve_config": figure.serve_config,
        "simulated": figure.simulated,
        "capacity": figure.capacity,
        "usd_per_million_at_capacity": _money(figure.usd_per_million_at_capacity),
        "usd_per_million_best_level": _money(figure.usd_per_million),
        "ranked_by": figure.ranked_by,
        "quality": None if quality is None else quality.as_json(),
    }
