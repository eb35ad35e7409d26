"""Rankings of priced trial figures: the cheapest configuration per model × GPU × vLLM image,
each model's cheapest against its size (the Pareto front), and each model's cheapest judged
configuration against its score (``quality_points``). Pure: they read no row; callers pass
measured and simulated figures separately.

Both rank by ``runs.selectors.trial_figures.cost_order``: the cost per 1M output tokens at
the capacity a trial's search found, where it has one, before the trials ranked by their best
fixed level's cost (``TrialFigure.ranking_usd_per_million`` and ``ranked_by``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from runs.selectors.report_quality import FigureQuality
from runs.selectors.trial_figures import TrialFigure, cost_order


@dataclass(frozen=True)
class BestConfig:
    """The cheapest trial of one (model, GPU type, GPU count, image tag) and how many were
    compared."""

    best: TrialFigure
    trials_compared: int
    trials_priced: int


def best_configs(figures: Iterable[TrialFigure]) -> list[BestConfig]:
    """Per (model, GPU type, GPU count, image tag): the trial with the lowest cost per 1M
    output tokens at the SLOs (at capacity first, see the module docstring). The image is part
    of the key so that a run measuring its grid on several vLLM versions shows each version's
    cheapest, not only the cheapest of all. Callers pass measured and simulated figures
    separately."""
    groups: dict[tuple, list[TrialFigure]] = {}
    for figure in figures:
        key = (figure.model.id, figure.gpu_type_id, figure.gpu_count, figure.image_tag)
        groups.setdefault(key, []).append(figure)
    rows = [
        BestConfig(
            best=min(group, key=cost_order),
            trials_compared=len(group),
            trials_priced=sum(1 for f in group if f.ranking_usd_per_million is not None),
        )
        for group in groups.values()
    ]
    return sorted(rows, key=lambda row: (cost_order(row.best), row.best.model.name))


@dataclass(frozen=True)
class ModelPoint:
    """One model's cheapest configuration, and whether it is on the Pareto front."""

    figure: TrialFigure
    pareto: bool


def model_points(figures: Iterable[TrialFigure]) -> list[ModelPoint]:
    """Per model, its cheapest priced trial; on the Pareto front of size (more parameters is
    better) against cost per token (less is better) when no other model is at least as large
    and at most as dear, and strictly one of the two. Largest model first."""
    cheapest: dict = {}
    for figure in figures:
        if figure.ranking_usd_per_million is None:
            continue
        current = cheapest.get(figure.model.id)
        if current is None or cost_order(figure) < cost_order(current):
            cheapest[figure.model.id] = figure
    points = list(cheapest.values())

    def dominated(a: TrialFigure) -> bool:
        cost = a.ranking_usd_per_million
        return any(
            b.model.parameter_count >= a.model.parameter_count
            and b.ranking_usd_per_million <= cost
            and (
                b.model.parameter_count > a.model.parameter_count
                or b.ranking_usd_per_million < cost
            )
            for b in points
        )

    return sorted(
        (ModelPoint(figure=p, pareto=not dominated(p)) for p in points),
        key=lambda point: (-point.figure.model.parameter_count, point.figure.model.name),
    )


@dataclass(frozen=True)
class QualityPoint:
    """A model's cheapest configuration on one evaluation: its cost at the SLOs and its
    quality (``score`` None: not judged, the quality's note says why)."""

    figure: TrialFigure
    quality: FigureQuality


def quality_points(
    figures: Iterable[TrialFigure], quality: dict[int, FigureQuality]
) -> list[QualityPoint]:
    """Per (model, evaluation): the cheapest priced figure (``cost_order``) that keeps its
    run's floor, among those with a score when any has one; a model whose figures on that
    evaluation have none gives its cheapest, not judged. Figures of runs without an
    evaluation take no part. By evaluation, then largest model first."""
    groups: dict[tuple, list[TrialFigure]] = {}
    for figure in figures:
        found = quality.get(figure.trial_id)
        if found is None or not found.kept or figure.ranking_usd_per_million is None:
            continue
        groups.setdefault((found.evaluation_key, figure.model.id), []).append(figure)
    points = []
    for group in groups.values():
        judged = [f for f in group if quality[f.trial_id].judged]
        best = min(judged or group, key=cost_order)
        points.append(QualityPoint(figure=best, quality=quality[best.trial_id]))
    return sorted(
        points,
        key=lambda p: (
            p.quality.evaluation,
            -(p.figure.model.parameter_count or 0),
            p.figure.model.name,
        ),
    )
