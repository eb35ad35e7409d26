"""What a run's search made of its grid, for its page and the API (docs/search.md).

Guarantees:

- One row per trial the search reported, in trial order, with its configuration's label,
  fate and figures (output tokens/s at capacity under the SLOs): ``predicted`` and
  ``calibrated`` are the simulator's (labelled so on the page), ``measured`` is the run's own
  (a brief look's when the fate is ``eliminated``).
- GPU-minutes are the pod's seconds × its GPU count / 60: what the search spent measuring
  (cold starts and levels, brief looks included) against what measuring every trial would
  have taken — the simulator's prediction where the search predicted every trial, else the
  run's own estimate of its trials (cold starts and levels), with where the figure came from.
- None for a run without a search.
"""

from __future__ import annotations

from runs.models import Run
from runs.run_as_started import run_engine, run_planned_trials
from runs.selectors.run_levels import planned_trial_labels


def run_search_state(*, run: Run) -> dict | None:
    """The run's search as its page shows it (module docstring)."""
    if not run.search:
        return None
    gpus = run_engine(run).gpu_count
    labels = planned_trial_labels(run_planned_trials(run))
    rows, spent, exhaustive, sources, strategies = [], 0.0, 0.0, set(), set()
    calibrations = []
    winners = []
    for image, report in sorted(run.search.items()):
        strategies.add(report["strategy"])
        spent += report["spent_seconds"]
        if report.get("exhaustive_seconds") is not None:
            exhaustive += report["exhaustive_seconds"]
            sources.add("simulated")
        else:
            sources.add("estimate")
        if report.get("calibration"):
            calibrations.append({"image": image, **report["calibration"]})
        if report.get("winner") is not None:
            winners.append({"trial": report["winner"], "decided": report.get("decided", True)})
        for fate in report["fates"]:
            rows.append({**fate, "image": image, "label": labels.get(fate["trial"], "")})
    rows.sort(key=lambda row: row["trial"])
    if "estimate" in sources:
        exhaustive = _estimated_trial_seconds(run)
    return {
        "strategy": " / ".join(sorted(strategies)),
        "rows": rows,
        "winners": winners,
        "spent_gpu_minutes": round(spent * gpus / 60, 1),
        "exhaustive_gpu_minutes": None if exhaustive is None else round(exhaustive * gpus / 60, 1),
        "exhaustive_source": "estimate" if "estimate" in sources else "simulated",
        "stopped_by": sorted(
            {report["stopped_by"] for report in run.search.values() if report.get("stopped_by")}
        ),
        "calibrations": calibrations,
        # The calibration the predictions started from (the job's search prior), as the run
        # froze it (runs.selectors.calibrations.CalibrationSource.as_json), or None.
        "prior": (run.experiment_snapshot or {}).get("calibration")
        if (run.job_spec.get("search") or {}).get("prior")
        else None,
    }


def _estimated_trial_seconds(run: Run) -> float | None:
    """The run's own estimate of measuring every trial: cold starts and levels (the
    provisioning and downloads are not a search's to save)."""
    assumptions = (run.experiment_snapshot or {}).get("estimate_trial_seconds")
    return float(assumptions) if assumptions is not None else None
