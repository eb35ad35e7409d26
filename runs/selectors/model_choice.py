"""The model choice for one experiment: its cheapest measured configuration against every
comparable experiment's (same workload and SLOs), simulated trials apart.

Ranked as every report is (``runs.selectors.trial_figures.cost_order``): by the cost per 1M
output tokens at the capacity a trial's search found, then the trials without a capacity by
their best fixed level's cost; each figure keeps both."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from runs.models import Experiment, Promotion, PromotionState
from runs.selectors.trial_figures import TENTH, TrialFigure, cost_order, trial_figures


@dataclass(frozen=True)
class ModelChoice:
    """The recommendation for one experiment's workload and SLOs.

    ``measured``: priced measured trials of the experiment and of every experiment of the
    organization with the same workload and SLOs (so other models compete), cheapest first;
    ``recommended`` is the first of them. ``unpriced`` measured trials met no level (or had
    no price). ``simulated`` trials are listed apart and never recommended. ``per_model``:
    each model's cheapest measured configuration, in the same order.
    """

    experiment: Experiment
    comparable: list[Experiment]
    measured: list[TrialFigure]
    unpriced: list[TrialFigure]
    simulated: list[TrialFigure]
    promoted: Promotion | None

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
    comparable = [
        other
        for other in Experiment.objects.filter(organization=org).select_related("model")
        if other.id == experiment.id
        or (other.workload == experiment.workload and (other.slos or {}) == (experiment.slos or {}))
    ]
    figures = trial_figures(org=org, experiments=comparable)
    measured = sorted((f for f in figures if not f.simulated), key=cost_order)
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
        measured=[f for f in measured if f.ranking_usd_per_million is not None],
        unpriced=[f for f in measured if f.ranking_usd_per_million is None],
        simulated=sorted((f for f in figures if f.simulated), key=cost_order),
        promoted=promoted,
    )
