"""The live run page's state in words: the selector's data (``runs.selectors.run_pages``)
with what the page prints — each trial's capacity search in words, its restarts' and
progress points' levels by name, the run's timeline, the cold start's bars and the answer
(``runs.answer_text``).

The run page renders it and ``live.json`` answers it; the page's script writes the same
timeline wording for the notices it applies between two reads.
"""

from __future__ import annotations

from datetime import datetime

from figures.levels import level_name
from runs.answer_text import answer_state, capacity_text
from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES, TrialOutcome
from runs.selectors.cold_starts import WaterfallStep
from runs.selectors.run_pages import run_live_data


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def level_text(level: dict | None) -> str:
    """``c=8`` or ``rate=2.5``: a level as the run page names it (``figures.levels``; empty
    for none)."""
    level = level or {}
    return level_name(concurrency=level.get("concurrency"), request_rate=level.get("request_rate"))


def run_timeline(run: Run, trials: list[dict], hello_at: datetime | None) -> list[dict]:
    """The run's stages in order: queued → provisioning → agent up → each trial's start,
    cold-start phases, levels and end → the run's end. ``status`` is done, failed or now."""
    entries = [{"stage": "queued", "label": "Queued", "at": _iso(run.created_at), "status": "done"}]
    if run.pod_started_at or run.provider:
        where = " · ".join(filter(None, [run.provider, run.pod_gpu_type, run.pod_cloud_type]))
        entries.append(
            {
                "stage": "provisioning",
                "label": f"Pod rented{f' ({where})' if where else ''}",
                "at": _iso(run.pod_started_at),
                "status": "done",
            }
        )
    resumes = 0
    for left in run.pod_history or []:
        if left.get("kind") == "next_image":
            entries.append(
                {
                    "stage": "next_image",
                    "label": f"Pod {left.get('pod_id')} done ({left.get('reason')}); the next "
                    "image's trials go to a new pod",
                    "at": left.get("ended_at"),
                    "status": "done",
                }
            )
            continue
        resumes += 1
        entries.append(
            {
                "stage": "resume",
                "label": f"Pod {left.get('pod_id')} lost ({left.get('reason')}); resumed on a "
                f"new pod for the trials not yet ended (resume {resumes})",
                "at": left.get("ended_at"),
                "status": "failed",
            }
        )
    if hello_at is not None:
        host = run.agent_info.get("hostname") or "agent"
        version = run.agent_info.get("vllm_version")
        entries.append(
            {
                "stage": "agent",
                "label": f"Agent started on {host}{f' · vLLM {version}' if version else ''}",
                "at": _iso(hello_at),
                "status": "done",
            }
        )
    for trial in trials:
        entries.extend(trial_timeline(trial))
    if run.state in TERMINAL_RUN_STATES:
        entries.append(
            {
                "stage": "finished",
                "label": f"Run {run.state}"
                + (f": {run.failure_reason}" if run.failure_reason else ""),
                "at": _iso(run.finished_at),
                "status": "done" if run.state == "succeeded" else "failed",
            }
        )
    elif entries:
        entries[-1]["status"] = "now"
    return entries


def trial_timeline(trial: dict) -> list[dict]:
    """One trial's part of the timeline (the live page builds the same from notices)."""
    index = trial["index"]
    entries = [
        {
            "stage": "trial",
            "trial": index,
            "label": f"Trial {index} started ({trial['label']})",
            "at": trial["started_at"],
            "status": "done",
        }
    ]
    for phase, seconds in trial["cold_start"]:
        entries.append(
            {
                "stage": "phase",
                "trial": index,
                "label": f"Trial {index}: {phase.replace('_', ' ')} at {seconds:.1f} s",
                "at": None,
                "status": "done",
            }
        )
    for level in trial["levels"]:
        entries.append(
            {
                "stage": "level",
                "trial": index,
                "label": f"Trial {index}: level {level['key']} done "
                f"({level['completed']} ok, {level['failed']} failed)",
                "at": None,
                "status": "failed" if level["failed"] else "done",
            }
        )
    if trial["outcome"] in (
        TrialOutcome.SUCCEEDED,
        TrialOutcome.FAILED,
        TrialOutcome.PARTIAL,
        TrialOutcome.SKIPPED,
    ):
        why = f" — {trial['failure_class']}" if trial["failure_class"] else ""
        entries.append(
            {
                "stage": "trial_end",
                "trial": index,
                "label": f"Trial {index} {trial['outcome']}{why}",
                "at": trial["finished_at"],
                "status": "failed" if trial["outcome"] == TrialOutcome.FAILED else "done",
            }
        )
    return entries


def waterfall_state(steps: list[WaterfallStep]) -> list[dict]:
    """The cold start's spans with their place on a bar (percent of the whole)."""
    total = max((step.start + step.seconds for step in steps), default=0.0)
    return [
        {
            "label": step.label,
            "start": round(step.start, 1),
            "seconds": round(step.seconds, 1),
            "note": step.note,
            "offset_pct": round(100 * step.start / total, 2) if total else 0,
            "width_pct": round(100 * step.seconds / total, 2) if total else 0,
        }
        for step in steps
    ]


def _trial_words(trial: dict) -> dict:
    """A trial's data with its capacity search in words and its restarts' levels named."""
    return {
        **trial,
        "capacity": capacity_text(trial["capacity"]),
        "restarts": [
            {**restart, "load": level_text(restart.get("level"))} for restart in trial["restarts"]
        ],
    }


def run_live_state(*, run: Run) -> dict:
    """Everything the live page draws, as JSON-ready data in the page's words (see
    ``runs.selectors.run_pages`` for what it covers)."""
    data = run_live_data(run=run)
    trials = [_trial_words(trial) for trial in data["trials"]]
    return {
        "run": data["run"],
        "now": data["now"],
        "axis": data["axis"],
        "flags": data["flags"],
        "planned_trials": data["planned_trials"],
        "planned_levels": data["planned_levels"],
        "trials": trials,
        "progress": [{**point, "level": level_text(point["level"])} for point in data["progress"]],
        "timeline": run_timeline(run, trials, data["hello_at"]),
        "cold_start": waterfall_state(data["cold_start"]),
        "answer": answer_state(
            data["answer"], {trial["index"]: trial["label"] for trial in trials}
        ),
        "epochs_read": data["epochs_read"],
    }
