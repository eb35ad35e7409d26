"""The models report: each model's size against its cost at the SLOs (the Pareto front), and
its quality against that cost, across models and sizes (issue 38).

Guarantees:

- Only configurations that keep their run's quality floor are ranked
  (``runs.selectors.report_quality``, the rule of the run's answer); the others are listed
  in ``excluded_for_quality`` with the reason.
- The quality points are ``runs.selectors.cost_rankings.quality_points`` of the stored
  ``TrialEvaluation`` scores: one per model and evaluation, never two evaluations on one
  scale. A simulated configuration has no score: it is listed as ``quality not judged:
  simulated``, never charted with a made-up one.
- Measured and simulated figures are never ranked together.
"""

from __future__ import annotations

from dataclasses import dataclass

from runs.models import Organization
from runs.selectors.cost_rankings import ModelPoint, QualityPoint, model_points, quality_points
from runs.selectors.report_quality import FigureQuality, figure_json, figures_quality
from runs.selectors.trial_figures import TrialFigure, cost_order, trial_figures


@dataclass(frozen=True)
class ModelsReport:
    """Per model its cheapest ranked configuration (``measured``, ``simulated``), the
    quality points of each (``quality_measured``, ``quality_simulated``), the priced
    configurations excluded for quality, cheapest first, and every figure's quality by
    trial id."""

    measured: list[ModelPoint]
    simulated: list[ModelPoint]
    quality_measured: list[QualityPoint]
    quality_simulated: list[QualityPoint]
    excluded_for_quality: list[TrialFigure]
    quality: dict[int, FigureQuality]


def models_report(*, org: Organization) -> ModelsReport:
    """See ``ModelsReport``."""
    figures = trial_figures(org=org)
    quality = figures_quality(org=org, figures=figures)

    def kept(figure: TrialFigure) -> bool:
        found = quality.get(figure.trial_id)
        return found is None or found.kept

    measured = [f for f in figures if not f.simulated]
    simulated = [f for f in figures if f.simulated]
    return ModelsReport(
        measured=model_points(f for f in measured if kept(f)),
        simulated=model_points(f for f in simulated if kept(f)),
        quality_measured=quality_points(measured, quality),
        quality_simulated=quality_points(simulated, quality),
        excluded_for_quality=sorted(
            (f for f in figures if f.ranking_usd_per_million is not None and not kept(f)),
            key=cost_order,
        ),
        quality=quality,
    )


def _point_json(point: ModelPoint, report: ModelsReport) -> dict:
    return figure_json(point.figure, report.quality.get(point.figure.trial_id)) | {
        "pareto": point.pareto
    }


def _quality_json(point: QualityPoint) -> dict:
    return figure_json(point.figure, point.quality)


def models_report_json(report: ModelsReport) -> dict:
    """The report as the API shows it (money as strings): the size-against-cost points, the
    quality-against-cost points, and what was excluded for quality and why."""
    return {
        "measured": [_point_json(p, report) for p in report.measured],
        "simulated": [_point_json(p, report) for p in report.simulated],
        "quality_against_cost": {
            "measured": [_quality_json(p) for p in report.quality_measured],
            "simulated": [_quality_json(p) for p in report.quality_simulated],
        },
        "excluded_for_quality": [
            figure_json(f, report.quality[f.trial_id])
            | {"reason": report.quality[f.trial_id].standing.reason}
            for f in report.excluded_for_quality
        ],
    }
