"""Reads behind the live run page: one run's state, its trials and its messages, as data
(the page's words, its timeline and the answer in words: ``frontend.runs.live_state``).

Guarantees:
- every function takes a run already reached through ``runs.access`` and reads only rows
  of its organization;
- ``run_live_data`` is what the live page re-reads after a (re)connect: the agent messages
  it covers are named per epoch (``epochs_read``: each epoch's ``last_seq`` and the
  ``gaps`` below it), read *before* the rows they produced, so a notice the state does not
  cover is never mistaken for one it does — also a restarted agent's, whose seqs start at 0
  again in an epoch of its own;
- a simulated figure always carries ``simulated`` (the page labels it);
- the run's answer is ``runs.selectors.run_answer``'s; each trial carries what its capacity
  search found (``capacity``, as the agent reported it);
- the number of queries does not grow with the number of trials or levels shown.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Prefetch
from django.utils import timezone

from agents import protocol
from runs.experiment_spec import PlannedTrial
from runs.models import AgentMessageRecord, Measurement, Run, Trial
from runs.models.runs import TERMINAL_RUN_STATES
from runs.run_as_started import (
    run_budget_cap,
    run_cost_is_known,
    run_is_simulated,
    run_planned_trials,
    run_workload,
)
from runs.selectors.cold_starts import run_cold_start
from runs.selectors.run_answer import run_answer
from runs.selectors.run_history import with_gpu_name
from runs.selectors.run_levels import level_rows, number, planned_trial_labels, varying_flags
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


def _trial_state(trial: Trial, label: str, planned: PlannedTrial | None) -> dict:
    # A trial's row may exist before its start names its configuration: the plan's meanwhile.
    config = trial.serve_config or (planned.serve_config if planned else {})
    levels = level_rows(trial.measurements.all())
    return {
        "index": trial.index,
        "label": label,
        "image_tag": trial.image_tag,
        "capacity": trial.capacity,  # as the agent reported its search
        "serve_config": config,
        "command": trial.command,
        "outcome": trial.outcome,
        "failure_class": trial.failure_class,
        "log_tail": trial.log_tail,
        "restarts": list(trial.restarts or []),
        "cold_start": sorted(
            ([phase, seconds] for phase, seconds in (trial.cold_start or {}).items()),
            key=lambda item: item[1] if number(item[1]) is not None else 0,
        ),
        "started_at": _iso(trial.started_at),
        "finished_at": _iso(trial.finished_at),
        "levels": levels,
        "simulated": any(level["simulated"] for level in levels),
    }


def _progress_point(epoch: int, seq: int, payload: dict, received_at: datetime) -> dict:
    return {
        "epoch": epoch,
        "seq": seq,
        "t": payload.get("sent_at") or received_at.timestamp(),
        "trial": payload.get("trial"),
        "level": payload.get("level"),
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


def run_live_data(*, run: Run) -> dict:
    """Everything the live page draws, as data (see the module's guarantees): JSON-ready but
    for ``hello_at`` (when the agent said hello, or None), ``cold_start`` (the cold start's
    spans, ``runs.selectors.cold_starts``) and ``answer`` (``runs.selectors.run_answer``'s
    ``RunAnswer``), which the page writes out."""
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
        "hello_at": hello.received_at if hello else None,
        "cold_start": run_cold_start(run),
        "answer": run_answer(run=run),
        "epochs_read": epochs_read,
    }
