"""An experiment's prediction (``runs.selectors.predictions``) as the builder shows it: every
configuration's simulated capacity and cost, texts ready to show, the best one marked, and
the label that says it is simulated."""

from __future__ import annotations

from runs.selectors.predictions import GridPrediction

SIMULATED_NOTE = (
    "Simulated: the vLLM simulator offline, on this server's CPU. Nothing is rented and "
    "nothing is stored; a measured run replaces these figures."
)


def _capacity_text(axis: str | None, capacity: float | None, with_slos: bool) -> str:
    if not with_slos:
        return "no SLOs"
    if capacity is None:
        return "meets the SLOs at no load"
    if axis == "request_rate":
        return f"{capacity:g} req/s"
    return f"{capacity:g} users"


def prediction_json(prediction: GridPrediction | None) -> dict | None:
    """The prediction for the builder's panel (numbers as texts; ``best``: the row index)."""
    if prediction is None:
        return None
    rows = []
    for index, row in enumerate(prediction.rows):
        rows.append(
            {
                "label": row.label,
                "best": index == prediction.best,
                "starts": row.starts,
                "capacity_text": _capacity_text(
                    row.capacity_axis, row.capacity, prediction.with_slos
                )
                if row.starts
                else f"will not start: {row.refusal}",
                "throughput_text": f"{row.output_throughput:,.0f} tok/s"
                if row.output_throughput
                else "–",
                "cost_text": f"${row.cost_per_million_usd:,.2f} ({row.priced_for})"
                if row.cost_per_million_usd is not None
                else "–",
                "gpu_minutes_text": f"{row.gpu_seconds / 60:.1f}",
            }
        )
    return {
        "simulated": True,
        "note": SIMULATED_NOTE,
        "rows": rows,
        "with_slos": prediction.with_slos,
        "exhaustive_text": f"{prediction.exhaustive_gpu_minutes:,.1f} GPU-minutes",
        "price_source": prediction.price_source,
        "warnings": prediction.warnings,
        "cpu_text": f"{prediction.cpu_seconds:.1f} s of CPU",
        "calibration_text": _calibration_text(prediction.calibration),
    }


def _calibration_text(calibration: dict | None) -> str:
    if calibration is None:
        return (
            "Not calibrated: the simulator's default constants (a measured vLLM run of this "
            "model on this GPU type and vLLM version calibrates them)."
        )
    return f"Calibrated: {calibration_summary(calibration)}."


def calibration_summary(calibration: dict) -> str:
    """Which calibration (when, from which runs) and how far its own fit was off."""
    count = len(calibration["runs"])
    runs = ", ".join(run[:8] for run in calibration["runs"][:3])
    more = f" and {count - 3} more" if count > 3 else ""
    return (
        f"the simulator's constants fitted on {calibration['created_at'][:10]} to "
        f"{calibration['points']} measured levels of run{'s' if count > 1 else ''} "
        f"{runs}{more} (vLLM {calibration['vllm_version']}); its own fit is off by "
        f"{calibration['fit_error_pct']:.1f} % on them ({calibration['error_before_pct']:.1f} % "
        "with the defaults)"
    )
