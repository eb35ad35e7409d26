"""Reads behind the live run page: one run's state, its trials and its timeline.

Guarantees:
- every function takes a run already reached through ``runs.access`` and reads only rows
  of its organization;
- ``run_live_state`` is what the live page re-reads after a (re)connect: the agent messages
  it covers are named per epoch (``epochs_read``: each epoch's ``last_seq`` and the
  ``gaps`` below it), read *before* the rows they produced, so a notice the state does not
  cover is never mistaken for one it does — also a restarted agent's, whose seqs start at 0
  again in an epoch of its own;
- a simulated figure always carries ``simulated`` (the page labels it);
- the run's answer (``answer``: the recommended configuration, its capacity at the SLOs,
  the cost per 1M output tokens there, its margin or a tie, the exact ``vllm serve``
  command) is ``runs.selectors.run_answer``'s, as text the pages print; each trial carries
  what its capacity search found (``capacity``);
- the number of queries does not grow with the number of trials or levels shown.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Prefetch
from django.utils import timezone

from agents import protocol
from figures.levels import level_name
from runs.experiment_spec import PlannedTrial
from runs.models import AgentMessageRecord, Measurement, Run, Trial
from runs.models.runs import TERMINAL_RUN_STATES, TrialOutcome
from runs.run_as_started import (
    run_budget_cap,
    run_cost_is_known,
    run_is_simulated,
    run_planned_trials,
    run_workload,
)
from runs.selectors.cold_starts import WaterfallStep, run_cold_start
from runs.selectors.run_answer import ConfigAnswer, RunAnswer, run_answer
from runs.selectors.run_history import with_gpu_name
from runs.selectors.run_levels import (
    config_label,
    level_rows,
    number,
    planned_trial_labels,
    varying_flags,
)
from runs.selectors.trial_quality import quality_floor_text
from runs.selectors.vllm_versions import vllm_version_mismatch

# At most this many level_progress points go to the page (evenly thinned beyond it).
MAX_PROGRESS_POINTS = 1500


def _planned_levels(run: Run) -> list[dict]:
    """The workload's levels, each as often as it runs (``repeats``): what every trial
    measures besides its capacity search."""
    try:
        workload = run_workload(run)
    except ValueError:
        return []
    return protocol.workload_levels(workload) * workload.repeats


def run_trials(run: Run) -> list[Trial]:
    """The run's trials in order, their measurements in the order they arrived."""
    measurements = Measurement.objects.filter(organization_id=run.organization_id)
    measurements = measurements.order_by("created_at", "id")
    return list(
        Trial.objects.filter(organization_id=run.organization_id, run=run)
        .order_by("index")
        .prefetch_related(Prefetch("measurements", queryset=measurements))
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


AXIS_NAMES = {"concurrency": "concurrency", "request_rate": "request rate"}
STOP_REASONS = {
    "converged": "converged",
    "probes_exhausted": "its probe budget was spent",
    "max_load": "every load up to the maximum met the SLOs",
    "below_lowest": "even the lowest load missed the SLOs",
    "stopped": "the trial ended first",
}


def load_text(axis: str | None, load: float | None) -> str:
    """``concurrency 31`` or ``request rate 2.5/s``: a load on a capacity search's axis."""
    if load is None:
        return "—"
    if axis == "request_rate":
        return f"request rate {load:g}/s"
    return f"concurrency {load:g}"


def capacity_text(capacity: dict | None) -> dict | None:
    """What a trial's capacity search found (``Trial.capacity``), as the pages print it."""
    if not capacity:
        return None
    axis, found = capacity.get("axis"), capacity.get("capacity")
    low, high = capacity.get("bracket_low"), capacity.get("bracket_high")
    # The high end was missed, or too close to call (not confidently met).
    above = "too close to call" if capacity.get("bracket_high_verdict") == "too_close" else "missed"
    if found is None:
        bracket = "no load met the SLOs"
    elif high is None:
        bracket = f"met at {low:g}; no load above it missed"
    else:
        bracket = f"bracket {low:g}–{high:g} (met at {low:g}, {above} at {high:g})"
        missed = capacity.get("first_missed")
        if missed is not None and missed != high:
            bracket += f"; first missed at {missed:g}, the most it can be"
    repeats = capacity.get("repeats") or 0
    probes = f"{capacity.get('probes', 0)} probe{'s' if capacity.get('probes') != 1 else ''}"
    if repeats:
        probes += f" + {repeats} repeat{'s' if repeats != 1 else ''}"
    reason = capacity.get("stop_reason")
    return {
        "axis": axis,
        "capacity": found,
        "text": load_text(axis, found) if found is not None else "none",
        "bracket": bracket,
        "probes": probes,
        "stop_reason": STOP_REASONS.get(reason, reason or ""),
        "output_throughput": number(capacity.get("output_throughput")),
    }


def _money(amount) -> str | None:
    return None if amount is None else f"${amount}"


def _points(value: float, sign: bool = False) -> str:
    return f"{value * 100:+.1f}" if sign else f"{value * 100:.1f}"


def quality_state(quality: dict | None) -> dict | None:
    """A configuration's quality (``runs.selectors.trial_quality``) as the pages print it:
    the score in %, its interval, and the drift from the reference in words."""
    if quality is None:
        return None
    state = dict(quality)
    if quality["score"] is not None:
        state["score_text"] = f"{_points(quality['score'])} %"
        state["interval_text"] = f"{_points(quality['low'])}–{_points(quality['high'])} %"
    found = quality.get("drift")
    if found is not None:
        share = found["changed_share"]
        drift = dict(found)
        drift["changed_text"] = f"{found['changed']} of {found['compared']}"
        if share is not None:
            low_high = f"{_points(share[1])}–{_points(share[2])} %"
            drift["changed_text"] += f" ({_points(share[0])} %, {low_high})"
        difference = found["score_difference"]
        drift["difference_text"] = (
            None
            if difference is None
            else f"{_points(difference[0], True)} pts ({_points(difference[1], True)} to "
            f"{_points(difference[2], True)})"
        )
        state["drift"] = drift
    return state


def _config_state(config: ConfigAnswer | None, labels: dict[int, str]) -> dict | None:
    if config is None:
        return None
    ci = config.usd_per_million_ci95
    # A trial that has not searched (yet) has no bracket: never "no load met the SLOs".
    bracket = (
        capacity_text(
            {
                "axis": config.axis,
                "capacity": config.capacity,
                "bracket_low": config.bracket_low,
                "bracket_high": config.bracket_high,
                "bracket_high_verdict": config.bracket_high_verdict,
                "probes": config.probes,
                "stop_reason": config.stop_reason,
            }
        )
        if config.axis is not None
        else None
    )
    return {
        "trial": config.trial,
        "label": labels.get(config.trial) or config_label(config.serve_config, []),
        "capacity": config.capacity,
        "capacity_text": load_text(config.axis, config.capacity),
        "bracket": bracket["bracket"] if bracket else "",
        "usd_per_million": _money(config.usd_per_million_output_tokens),
        "usd_per_million_ci95": None if ci is None else [_money(ci[0]), _money(ci[1])],
        "output_throughput": config.output_throughput,
        "serve_command": config.serve_command,
        "quality": quality_state(config.quality),
        "note": config.note,
        "priced_for": config.priced_for,
        "quality_floor": config.quality_floor,
    }


def answer_state(answer: RunAnswer, labels: dict[int, str]) -> dict:
    """The run's answer (``runs.selectors.run_answer``) as the pages print it: money as
    ``$0.5000``, loads as ``concurrency 31``, each configuration under its label."""
    margin_ci = answer.margin_ci95_pct
    return {
        "simulated": answer.simulated,
        "slos": answer.slos or "none",
        "winner": _config_state(answer.winner, labels),
        "runner_up": _config_state(answer.runner_up, labels),
        "tie": answer.tie,
        "margin_pct": answer.margin_pct,
        "margin_ci95_pct": None if margin_ci is None else list(margin_ci),
        "pod_usd_per_hr": _money(answer.pod_usd_per_hr),
        "configs": [_config_state(config, labels) for config in answer.configs],
        # Whether the run scores its configurations on an evaluation (a column each).
        "quality": any(config.quality is not None for config in answer.configs),
        "defaults": _config_state(answer.defaults, labels),
        "over_defaults": None if answer.over_defaults is None else answer.over_defaults.as_json(),
        # The quality floor in words (None: none) and the configurations it excluded or could
        # not judge, each under its label.
        "quality_floor": (
            None if answer.quality_floor is None else quality_floor_text(answer.quality_floor)
        ),
        "excluded_for_quality": _labelled(answer.excluded_for_quality, labels),
        "quality_not_judged": _labelled(answer.quality_not_judged, labels),
    }


def _labelled(listed: list[dict], labels: dict[int, str]) -> list[dict]:
    return [{**item, "label": labels.get(item["trial"], "")} for item in listed]


def run_answer_state(*, run: Run) -> dict:
    """``answer_state`` of ``run``, each configuration labelled by the flags that vary."""
    labels = planned_trial_labels(run_planned_trials(run))
    return answer_state(run_answer(run=run), labels)


def _trial_state(trial: Trial, label: str, planned: PlannedTrial | None) -> dict:
    # A trial's row may exist before its start names its configuration: the plan's meanwhile.
    config = trial.serve_config or (planned.serve_config if planned else {})
    levels = level_rows(trial.measurements.all())
    return {
        "index": trial.index,
        "label": label,
        "image_tag": trial.image_tag,
        "capacity": capacity_text(trial.capacity),
        "serve_config": config,
        "command": trial.command,
        "outcome": trial.outcome,
        "failure_class": trial.failure_class,
        "log_tail": trial.log_tail,
        "restarts": [
            {**restart, "load": level_text(restart.get("level"))}
            for restart in trial.restarts or []
        ],
        "cold_start": sorted(
            ([phase, seconds] for phase, seconds in (trial.cold_start or {}).items()),
            key=lambda item: item[1] if number(item[1]) is not None else 0,
        ),
        "started_at": _iso(trial.started_at),
        "finished_at": _iso(trial.finished_at),
        "levels": levels,
        "simulated": any(level["simulated"] for level in levels),
    }


def level_text(level: dict | None) -> str:
    """``c=8`` or ``rate=2.5``: a level as the run page names it (``figures.levels``; empty
    for none)."""
    level = level or {}
    return level_name(concurrency=level.get("concurrency"), request_rate=level.get("request_rate"))


def _progress_point(epoch: int, seq: int, payload: dict, received_at: datetime) -> dict:
    load = level_text(payload.get("level") or {"request_rate": None})
    return {
        "epoch": epoch,
        "seq": seq,
        "t": payload.get("sent_at") or received_at.timestamp(),
        "trial": payload.get("trial"),
        "level": load,
        "kv_cache_usage": payload.get("kv_cache_usage"),
        "num_requests_waiting": payload.get("num_requests_waiting"),
        "gpus": _gpu_points(payload.get("gpus")),
        "requests_done": payload.get("requests_done"),
        "requests_total": payload.get("requests_total"),
    }


_GPU_CHART_FIELDS = ("index", "utilization_pct", "memory_used_mib", "memory_total_mib")


def _gpu_points(gpus: object) -> list[dict] | None:
    """A progress point's GPUs with what the chart draws (utilization, memory used of total),
    as the live notice carries them."""
    if not isinstance(gpus, list):
        return None
    return [{name: gpu.get(name) for name in _GPU_CHART_FIELDS} for gpu in gpus]


def _thin(points: list, limit: int) -> list:
    if len(points) <= limit:
        return points
    step = len(points) / limit
    return [points[int(i * step)] for i in range(limit - 1)] + [points[-1]]


def _epochs_read(run: Run) -> list[dict]:
    """Per epoch with stored messages: its highest seq and the gaps below it, the inclusive
    ranges of seqs not stored (yet: resends may fill them), so the page can tell each notice
    it is sent from those read. As ranges, the answer grows with the rows stored, never with
    the seqs: one message at seq 2**62 is one gap, not a list of 2**62 numbers."""
    rows = AgentMessageRecord.objects.filter(organization_id=run.organization_id, run=run)
    rows = rows.order_by("epoch", "seq")
    read: list[dict] = []
    for epoch, seq in rows.values_list("epoch", "seq"):
        if not read or read[-1]["epoch"] != epoch:
            read.append({"epoch": epoch, "last_seq": -1, "gaps": []})
        entry = read[-1]
        if seq > entry["last_seq"] + 1:
            entry["gaps"].append([entry["last_seq"] + 1, seq - 1])
        entry["last_seq"] = seq
    return read


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


def run_live_state(*, run: Run) -> dict:
    """Everything the live page draws, as JSON-ready data (see the module's guarantees)."""
    epochs_read = _epochs_read(run)  # first: the rows below are at least this new
    run.refresh_from_db()
    this_run = Run.objects.filter(organization_id=run.organization_id, pk=run.pk)
    gpu_name = with_gpu_name(this_run).values_list("gpu_name", flat=True)
    trial_rows = run_trials(run)
    planned = run_planned_trials(run)
    labels = planned_trial_labels(planned)
    flags = varying_flags([trial.serve_config for trial in planned])
    trials = [
        _trial_state(
            trial,
            labels.get(trial.index, ""),
            planned[trial.index] if trial.index < len(planned) else None,
        )
        for trial in trial_rows
    ]
    # In the order agents sent them: a restarted agent's epoch follows its predecessor's.
    records = AgentMessageRecord.objects.filter(organization_id=run.organization_id, run=run)
    records = records.order_by("epoch", "seq")
    hello = records.filter(type="hello").only("received_at").first()
    progress = [
        _progress_point(*row)
        for row in records.filter(type="level_progress").values_list(
            "epoch", "seq", "payload", "received_at"
        )
    ]
    levels = _planned_levels(run)
    axis = "concurrency" if any("concurrency" in level for level in levels) else "request_rate"
    return {
        "run": {
            "id": str(run.id),
            "state": run.state,
            "terminal": run.state in TERMINAL_RUN_STATES,
            "simulated": run_is_simulated(run),
            "gpu_name": gpu_name.get(),
            "created_at": _iso(run.created_at),
            "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
            "pod_started_at": _iso(run.pod_started_at),
            "pod_terminated_at": _iso(run.pod_terminated_at),
            "price_usd_hr": None if run.price_usd_hr is None else str(run.price_usd_hr),
            # None: unknown (an existing endpoint without a price), never a made-up zero.
            "cost_usd": str(run.cost_usd) if run_cost_is_known(run) else None,
            "billed_seconds": run.billed_seconds,
            "budget_cap_usd": str(run_budget_cap(run)),
            "cancel_requested_at": _iso(run.cancel_requested_at),
            "failure_reason": run.failure_reason,
            # Refused agent messages (see runs.services.ingest): the page warns of them.
            "agent_conflicts": run.agent_conflicts,
            "agent_conflict_last": run.agent_conflict_last,
            "vllm_mismatch": vllm_version_mismatch(run),
        },
        "now": _iso(timezone.now()),
        "axis": axis,
        "flags": flags,
        "planned_trials": len(planned),
        "planned_levels": len(levels),
        "trials": trials,
        "progress": _thin(progress, MAX_PROGRESS_POINTS),
        "timeline": run_timeline(run, trials, hello.received_at if hello else None),
        "cold_start": waterfall_state(run_cold_start(run)),
        "answer": answer_state(
            run_answer(run=run), {trial["index"]: trial["label"] for trial in trials}
        ),
        "epochs_read": epochs_read,
    }
