"""An experiment's cost estimate as the builder's live panel and the experiment page show it:
numbers as JSON, texts ready to show."""

from __future__ import annotations

from frontend.experiments.prediction_panel import calibration_summary
from runs.selectors.estimates import CostEstimate


def estimate_json(estimate: CostEstimate | None) -> dict | None:
    """An estimate for the builder's live panel (numbers as JSON, texts ready to show)."""
    if estimate is None:
        return None
    return {
        "trials": estimate.trials,
        "levels_per_trial": estimate.levels_per_trial,
        "cost_usd": None if estimate.cost_usd is None else str(estimate.cost_usd),
        "cost_text": cost_text(estimate),
        "total_seconds": estimate.total_seconds,
        "duration_text": duration_text(estimate.total_seconds),
        "budget_cap_usd": str(estimate.budget_cap_usd),
        "within_budget": estimate.within_budget,
        "price_source": estimate.price_source,
        "warnings": estimate.warnings,
        # Which calibration the sweep was timed with, and its own fit error ("": defaults).
        "calibration_text": (
            f"Timed with the simulator calibrated: {calibration_summary(estimate.calibration)}."
            if estimate.calibration
            else ""
        ),
    }


def cost_text(estimate: CostEstimate) -> str:
    if estimate.cost_usd is None:
        return "unknown (no price)"
    return f"${estimate.cost_usd:,}"


def duration_text(seconds: float) -> str:
    """22.4 → '22 s'; 1234.5 → '21 min'; 5000 → '1 h 23 min'."""
    if seconds < 120:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
