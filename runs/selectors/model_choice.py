"""The model choice for one experiment: its cheapest measured configuration against every
comparable experiment's (same workload and SLOs), simulated trials apart.

Ranked as every report is (``runs.selectors.trial_figures.cost_order``): by the cost per 1M
output tokens at the capacity a trial's search found, then the trials without a capacity by
their best fixed level's cost; each figure keeps both.

Only configurations that keep their run's quality floor are ranked
(``runs.selectors.report_quality``: the rule of the run's answer); the others are listed in
``excluded_for_quality`` with the reason (a floor below the best model is measured from
the best score on the same evaluation among the comparable experiments:
``runs.selectors.model_floor``). A ranked configuration without a score is marked
``quality not judged: …`` (``quality_not_judged``), never excluded."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

from runs.models import Experiment, Promotion, PromotionState
from runs.selectors.model_floor import comparable_experiments
from runs.selectors.report_quality import FigureQuality, figure_json, figures_quality
from runs.selectors.trial_figures import TENTH, TrialFigure, cost_order, trial_figures


@dataclass(frozen=True)
class ModelChoice:
    """The recommendation for one experiment's workload and SLOs.

    ``measured``: priced measured trials of the experiment and of every experiment of the
    organization with the same workload and SLOs (so other models compete) that keep their
    run's quality floor, cheapest first; ``recommended`` is the first of them.
    ``excluded_for_quality``: the priced measured trials their floor excluded, cheapest
    first. ``unpriced`` measured trials met no level (or had no price). ``simulated``
    trials are listed apart and never recommended. ``per_model``: each model's cheapest
    ranked configuration, in the same order. ``quality``: each trial's quality by trial
    id, for those of runs with an evaluation.
    """

    experiment: Experiment
    comparable: list[Experiment]
    measured: list[TrialFigure]
    unpriced: list[TrialFigure]
    simulated: list[TrialFigure]
    promoted: Promotion | None
    excluded_for_quality: list[TrialFigure] = field(default_factory=list)
    quality: dict[int, FigureQuality] = field(default_factory=dict)

    def quality_of(self, figure: TrialFigure) -> FigureQuality | None:
        return self.quality.get(figure.trial_id)

    @property
    def quality_not_judged(self) -> list[TrialFigure]:
        """The ranked trials a floor holds that have no score (they stay in)."""
        return [
            f
            for f in self.measured
            if (q := self.quality_of(f)) is not None and q.standing and not q.standing.judged
        ]

    @property
    def recommended(self) -> TrialFigure | None:
        return self.measured[0] if self.measured else None

    @property
    def runners_up(self) -> list[TrialFigure]:
        return self.measured[1:6]

    @property
    def per_model(self) -> list[TrialFigure]:
        seen, bests = set(), []
        for figure in self.measured:
            if figure.model.id not in seen:
                seen.add(figure.model.id)
                bests.append(figure)
        return bests

    @property
    def saving_pct(self) -> Decimal | None:
        """How much cheaper per token the recommendation is than the first runner-up, when
        both were ranked by the same figure (both at capacity, or both at a fixed level)."""
        if len(self.measured) < 2:
            return None
        first, runner_up = self.measured[0], self.measured[1]
        if first.ranked_at_capacity != runner_up.ranked_at_capacity:
            return None
        best, second = first.ranking_usd_per_million, runner_up.ranking_usd_per_million
        if not second:
            return None
        return ((second - best) / second * 100).quantize(TENTH, rounding=ROUND_HALF_EVEN)


def model_choice(*, experiment: Experiment) -> ModelChoice:
    """See ``ModelChoice``."""
    org = experiment.organization
    comparable = comparable_experiments(experiment)
    figures = trial_figures(org=org, experiments=comparable)
    quality = figures_quality(org=org, figures=figures)
    measured = sorted((f for f in figures if not f.simulated), key=cost_order)
    priced = [f for f in measured if f.ranking_usd_per_million is not None]
    promoted = (
        Promotion.objects.filter(
            organization=org, experiment=experiment, state=PromotionState.APPROVED
        )
        .select_related("trial__run", "proposed_by", "decided_by")
        .first()
    )
    return ModelChoice(
        experiment=experiment,
        comparable=comparable,
        measured=[f for f in priced if _kept(quality, f)],
        unpriced=[f for f in measured if f.ranking_usd_per_million is None],
        simulated=sorted((f for f in figures if f.simulated), key=cost_order),
        promoted=promoted,
        excluded_for_quality=[f for f in priced if not _kept(quality, f)],
        quality=quality,
    )


def _kept(quality: dict[int, FigureQuality], figure: TrialFigure) -> bool:
    found = quality.get(figure.trial_id)
    return found is None or found.kept


def model_choice_json(choice: ModelChoice, *, listed: int) -> dict:
    """The model choice as the API shows it: the recommendation, the ranked candidates (the
    first ``listed``), each model's best, and every configuration excluded for quality or
    ranked without a score, each with the reason; money as strings."""

    def figures(rows: list[TrialFigure]) -> list[dict]:
        return [figure_json(f, choice.quality_of(f)) for f in rows]

    return {
        "experiment": str(choice.experiment.id),
        "comparable_experiments": [str(e.id) for e in choice.comparable],
        "recommended": figures(choice.measured[:1])[0] if choice.measured else None,
        "saving_pct": None if choice.saving_pct is None else str(choice.saving_pct),
        "ranked": figures(choice.measured[:listed]),
        "ranked_total": len(choice.measured),
        "per_model": figures(choice.per_model),
        "excluded_for_quality": [
            _listed(f, choice.quality_of(f).standing.reason) for f in choice.excluded_for_quality
        ],
        "quality_not_judged": [
            _listed(f, choice.quality_of(f).standing.reason) for f in choice.quality_not_judged
        ],
        "unpriced_total": len(choice.unpriced),
        "simulated": figures(choice.simulated[:listed]),
        "simulated_total": len(choice.simulated),
    }


def _listed(figure: TrialFigure, reason: str) -> dict:
    return {
        "run": str(figure.run_id),
        "trial": figure.trial_index,
        "experiment": str(figure.experiment.id),
        "model": figure.model.name,
        "image_tag": figure.image_tag,
        "reason": reason,
    }
