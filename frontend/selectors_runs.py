"""Reads behind the run pages: one run's live state, the run history and comparisons.

Guarantees:
- every function takes a membership or a run already reached through ``runs.access``, so no
  read wanders into another organization's rows;
- ``run_live_state`` is what the live page re-reads after a (re)connect: the agent messages
  it covers are named per epoch (``epochs_read``: each epoch's ``last_seq`` and the
  ``gaps`` below it), read *before* the rows they produced, so a notice the state does not
  cover is never mistaken for one it does — also a restarted agent's, whose seqs start at 0
  again in an epoch of its own;
- a simulated figure always carries ``simulated`` (the page labels it, comparisons refuse
  to rank it against a measured one);
- the number of queries of each page does not grow with the number of runs shown.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta
from typing import Any

from django.db.models import CharField, Count, OuterRef, Prefetch, Q, QuerySet, Subquery, Value
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, NullIf
from django.utils import timezone

from agents import protocol
from runs.access import scoped
from runs.frozen_job import (
    GPU_TYPE_PATH,
    IMAGE_TAG_PATH,
    MODEL_PATH,
    SIMULATED_RUNS,
    run_budget_cap,
    run_engine,
    run_is_simulated,
    run_serve_configs,
    run_workload,
)
from runs.models import (
    AgentMessageRecord,
    Experiment,
    GpuType,
    Measurement,
    Membership,
    Run,
    Trial,
)
from runs.models.experiments import Engine
from runs.models.runs import TERMINAL_RUN_STATES, TrialOutcome
from runs.selectors.trial_costs import trial_costs

LOWER, HIGHER = "lower", "higher"


@dataclass(frozen=True)
class Metric:
    """A figure of a load level: where it is in the result and which way is better."""

    key: str
    label: str
    result_key: str
    better: str
    unit: str


METRICS = (
    Metric("ttft_p50", "TTFT p50", "median_ttft_ms", LOWER, "ms"),
    Metric("ttft_p99", "TTFT p99", "p99_ttft_ms", LOWER, "ms"),
    Metric("itl_p50", "ITL p50", "median_itl_ms", LOWER, "ms"),
    Metric("itl_p99", "ITL p99", "p99_itl_ms", LOWER, "ms"),
    Metric("tpot_p50", "TPOT p50", "median_tpot_ms", LOWER, "ms"),
    Metric("tpot_p99", "TPOT p99", "p99_tpot_ms", LOWER, "ms"),
    Metric("output_throughput", "Output tokens/s", "output_throughput", HIGHER, "tok/s"),
)
# At most this many level_progress points go to the page (evenly thinned beyond it).
MAX_PROGRESS_POINTS = 1500


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _gauge(server: dict, name: str, part: str = "max") -> float | None:
    entry = server.get(name)
    return _number(entry.get(part)) if isinstance(entry, dict) else None


def level_key(measurement: Measurement) -> str:
    """``c=8``, ``rate=2.5`` or ``rate=inf``: how the page names (and dedupes) a level."""
    if measurement.concurrency is not None:
        return f"c={measurement.concurrency}"
    return "rate=inf" if measurement.request_rate_infinite else f"rate={measurement.request_rate:g}"


def level_figures(measurement: Measurement) -> dict:
    """One measurement as the pages show it: the level, every ``METRICS`` figure, how many
    requests completed or failed, the server's KV-cache and queue peaks, and the labels."""
    result, server = measurement.result or {}, measurement.server_metrics or {}
    figures = {
        "key": level_key(measurement),
        "concurrency": measurement.concurrency,
        "request_rate": "inf" if measurement.request_rate_infinite else measurement.request_rate,
        "completed": result.get("completed"),
        "failed": result.get("failed"),
        "partial": bool(result.get("partial")),
        "simulated": result.get("simulated") not in (None, False),
        "kv_cache_max": _gauge(server, "kv_cache_usage_perc"),
        "waiting_max": _gauge(server, "num_requests_waiting"),
        "preemptions": _number(server.get("num_preemptions")),
    }
    for metric in METRICS:
        figures[metric.key] = _number(result.get(metric.result_key))
    return figures


def _config_text(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value


def varying_flags(configs: list[dict]) -> list[str]:
    """The serve flags whose value differs between ``configs`` (in schema order)."""
    names = {name for config in configs for name in config}
    ordered = [name for name in protocol.SERVE_FLAGS if name in names]
    ordered += sorted(names - set(ordered))
    return [
        name
        for name in ordered
        if len({_config_text(config.get(name, "(default)")) for config in configs}) > 1
    ]


def config_label(config: dict, flags: list[str]) -> str:
    """``max_num_seqs=64, enable_prefix_caching=true``: the flags that tell configs apart."""
    shown = [f"{name}={_config_text(config.get(name, '(default)'))}" for name in flags]
    if shown:
        return ", ".join(shown)
    return ", ".join(f"{k}={_config_text(v)}" for k, v in config.items()) or "vLLM defaults"


def _planned_levels(run: Run) -> list[dict]:
    try:
        return protocol.workload_levels(run_workload(run))
    except ValueError:
        return []


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


def _trial_state(trial: Trial, flags: list[str], planned: dict | None) -> dict:
    config = trial.serve_config or planned or {}
    levels = [level_figures(m) for m in trial.measurements.all()]
    return {
        "index": trial.index,
        "label": config_label(config, flags),
        "serve_config": config,
        "command": trial.command,
        "outcome": trial.outcome,
        "failure_class": trial.failure_class,
        "log_tail": trial.log_tail,
        "cold_start": sorted(
            ([phase, seconds] for phase, seconds in (trial.cold_start or {}).items()),
            key=lambda item: item[1] if _number(item[1]) is not None else 0,
        ),
        "started_at": _iso(trial.started_at),
        "finished_at": _iso(trial.finished_at),
        "levels": levels,
        "simulated": any(level["simulated"] for level in levels),
    }


def _progress_point(epoch: int, seq: int, payload: dict, received_at: datetime) -> dict:
    level = payload.get("level") or {}
    if "concurrency" in level:
        load = f"c={level['concurrency']}"
    else:
        load = f"rate={level.get('request_rate')}"
    return {
        "epoch": epoch,
        "seq": seq,
        "t": payload.get("sent_at") or received_at.timestamp(),
        "trial": payload.get("trial"),
        "level": load,
        "kv_cache_usage": payload.get("kv_cache_usage"),
        "num_requests_waiting": payload.get("num_requests_waiting"),
        "requests_done": payload.get("requests_done"),
        "requests_total": payload.get("requests_total"),
    }


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
    if hello_at is not None:
        host = run.agent_info.get("hostname") or "agent"
        version = run.agent_info.get("vllm_version")
        entries.append(
            {
                "stage": "agent",
                "label": f"Agent up on {host}{f' · vLLM {version}' if version else ''}",
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


def run_live_state(*, run: Run) -> dict:
    """Everything the live page draws, as JSON-ready data (see the module's guarantees)."""
    epochs_read = _epochs_read(run)  # first: the rows below are at least this new
    run.refresh_from_db()
    this_run = Run.objects.filter(organization_id=run.organization_id, pk=run.pk)
    gpu_name = with_gpu_name(this_run).values_list("gpu_name", flat=True)
    trial_rows = run_trials(run)
    planned = run_serve_configs(run)
    configs = planned or [trial.serve_config or {} for trial in trial_rows]
    flags = varying_flags(configs)
    trials = [
        _trial_state(trial, flags, planned[trial.index] if trial.index < len(planned) else None)
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
            "cost_usd": str(run.cost_usd),
            "billed_seconds": run.billed_seconds,
            "budget_cap_usd": str(run_budget_cap(run)),
            "cancel_requested_at": _iso(run.cancel_requested_at),
            "failure_reason": run.failure_reason,
            # Refused agent messages (see runs.services.ingest): the page warns of them.
            "agent_conflicts": run.agent_conflicts,
            "agent_conflict_last": run.agent_conflict_last,
        },
        "now": _iso(timezone.now()),
        "axis": axis,
        "flags": flags,
        "planned_trials": len(planned),
        "planned_levels": len(levels),
        "trials": trials,
        "progress": _thin(progress, MAX_PROGRESS_POINTS),
        "timeline": run_timeline(run, trials, hello.received_at if hello else None),
        "epochs_read": epochs_read,
    }


# --- History ---------------------------------------------------------------------------------


@dataclass
class HistoryFilters:
    """What the history page filters on (each optional)."""

    model: uuid.UUID | None = None
    gpu: str = ""
    engine: str = ""  # "sim", or a vLLM image tag such as "v0.11.0"
    state: str = ""
    created_from: date | None = None
    created_to: date | None = None  # inclusive


def runs_history(*, membership: Membership, filters: HistoryFilters) -> QuerySet[Run]:
    """The organization's runs matching ``filters``, newest first, with what a row shows."""
    runs = scoped(membership, Run)
    # Filtered on what each run was started with (runs.frozen_job), not its experiment now.
    if filters.model is not None:
        runs = runs.filter(**{MODEL_PATH: str(filters.model)})
    if filters.gpu:
        runs = runs.filter(
            Q(pod_gpu_type=filters.gpu) | Q(pod_gpu_type="", **{GPU_TYPE_PATH: filters.gpu})
        )
    if filters.engine == Engine.SIM:
        runs = runs.filter(SIMULATED_RUNS)
    elif filters.engine:
        runs = runs.filter(~SIMULATED_RUNS, **{IMAGE_TAG_PATH: filters.engine})
    if filters.state:
        runs = runs.filter(state=filters.state)
    if filters.created_from:
        runs = runs.filter(created_at__gte=_day_start(filters.created_from))
    if filters.created_to:
        runs = runs.filter(created_at__lt=_day_start(filters.created_to + timedelta(days=1)))
    return (
        with_gpu_name(runs)
        .select_related("experiment__model", "experiment__gpu_type", "started_by")
        .order_by("-created_at", "-id")
    )


def with_gpu_name(runs: QuerySet[Run]) -> QuerySet[Run]:
    """``runs`` with ``gpu_name``: the GPU type of the run's pod once one is recorded, else
    the display name of the type it was started with (its id when the catalogue no longer
    has it), in the same query as the runs."""
    frozen = KT(GPU_TYPE_PATH)
    display_name = GpuType.objects.filter(id=OuterRef("frozen_gpu_type")).values("display_name")
    return runs.annotate(frozen_gpu_type=frozen).annotate(
        gpu_name=Coalesce(
            NullIf("pod_gpu_type", Value("")),
            Subquery(display_name[:1]),
            frozen,
            output_field=CharField(),
        )
    )


def _day_start(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=timezone.get_current_timezone())


def with_simulated(runs: list[Run]) -> list[Run]:
    """Sets ``simulated`` on each run, for a template (``runs.frozen_job.run_is_simulated``)."""
    for run in runs:
        run.simulated = run_is_simulated(run)
    return runs


def with_trial_counts(runs: list[Run]) -> list[Run]:
    """Sets ``trial_count`` on each run (one query for the page, not one per row)."""
    counts = dict(
        Trial.objects.filter(
            organization_id__in={run.organization_id for run in runs}, run__in=runs
        )
        .values_list("run_id")
        .annotate(n=Count("id"))
        .values_list("run_id", "n")
    )
    for run in runs:
        run.trial_count = counts.get(run.id, 0)
    return runs


def engine_versions(*, membership: Membership) -> list[str]:
    """The engine choices the organization's experiments use: "sim" and image tags."""
    rows = scoped(membership, Experiment).values_list("engine", "engine_image_tag").distinct()
    versions = {Engine.SIM.value if engine == Engine.SIM else tag for engine, tag in rows}
    return sorted(v for v in versions if v)


# --- Comparison ------------------------------------------------------------------------------

MAX_COMPARED_TRIALS = 16
_TRIAL_REF = re.compile(r"^(?P<run>[0-9a-fA-F-]{32,36})(?::(?P<index>\d{1,5}))?$")


class CompareInputError(ValueError):
    """The comparison's selection cannot be read; the message says which part and why."""


@dataclass(frozen=True)
class Selection:
    """A run (all its trials) or one trial of a run."""

    run_id: uuid.UUID
    trial_index: int | None = None

    def __str__(self) -> str:
        return str(self.run_id) if self.trial_index is None else f"{self.run_id}:{self.trial_index}"


def parse_selection(runs: list[str], trials: list[str]) -> list[Selection]:
    """Reads ``runs=<uuid>`` and ``trials=<uuid>:<index>`` values; raises
    ``CompareInputError`` naming the first value that is not one, or too few or too many."""
    selected: list[Selection] = []
    for name, values, needs_index in (("runs", runs, False), ("trials", trials, True)):
        for raw in values:
            text = raw.strip()
            match = _TRIAL_REF.match(text)
            try:
                run_id = uuid.UUID(match["run"]) if match else None
            except ValueError:
                run_id = None
            if run_id is None or (match["index"] is None) == needs_index:
                shape = "<run id>:<trial index>" if needs_index else "a run id (a UUID)"
                shown = text if len(text) <= 60 else text[:60] + "…"
                raise CompareInputError(f"{name}: {shown!r} is not {shape}.")
            selection = Selection(run_id, int(match["index"]) if needs_index else None)
            if selection not in selected:
                selected.append(selection)
    if len(selected) < 2:
        raise CompareInputError("Pick two or more runs or trials to compare.")
    return selected


@dataclass
class ComparedTrial:
    """One column of a comparison."""

    ref: str
    run: Run
    trial: Trial
    label: str = ""
    levels: dict[str, dict] = field(default_factory=dict)
    cost: Any = None
    simulated: bool = False


def compare_trials(*, membership: Membership, selection: list[Selection]) -> list[ComparedTrial]:
    """The selected trials (a run stands for all of its trials), in the order picked.

    A run or trial of another organization is answered like a missing one (``LookupError``
    naming it, which the page turns into a 404). Raises ``CompareInputError`` when there are
    fewer than two trials or more than ``MAX_COMPARED_TRIALS``."""
    run_ids = {s.run_id for s in selection}
    runs = {
        run.id: run
        for run in scoped(membership, Run)
        .filter(id__in=run_ids)
        .select_related("experiment__model", "experiment__gpu_type", "organization")
    }
    missing = run_ids - runs.keys()
    if missing:
        raise LookupError(f"No run {sorted(map(str, missing))[0]} in this organization.")
    measurements = scoped(membership, Measurement).order_by("created_at", "id")
    trials_by_run: dict[uuid.UUID, list[Trial]] = {}
    for trial in (
        scoped(membership, Trial)
        .filter(run_id__in=run_ids)
        .order_by("run_id", "index")
        .prefetch_related(Prefetch("measurements", queryset=measurements))
    ):
        trial.run = runs[trial.run_id]
        trials_by_run.setdefault(trial.run_id, []).append(trial)
    compared: list[ComparedTrial] = []
    for item in selection:
        trials = trials_by_run.get(item.run_id, [])
        if item.trial_index is not None:
            trials = [t for t in trials if t.index == item.trial_index]
            if not trials:
                raise LookupError(f"Run {item.run_id} has no trial {item.trial_index}.")
        for trial in trials:
            ref = f"{trial.run_id}:{trial.index}"
            if all(c.ref != ref for c in compared):
                compared.append(ComparedTrial(ref=ref, run=runs[trial.run_id], trial=trial))
    if len(compared) < 2:
        raise CompareInputError(
            "The selection holds fewer than two trials with results; pick two or more."
        )
    if len(compared) > MAX_COMPARED_TRIALS:
        raise CompareInputError(
            f"The selection holds {len(compared)} trials; compare at most "
            f"{MAX_COMPARED_TRIALS} at once (pick trials instead of whole runs)."
        )
    flags = varying_flags([c.trial.serve_config or {} for c in compared])
    for column in compared:
        column.label = config_label(column.trial.serve_config or {}, flags)
        column.levels = {
            level["key"]: level for level in map(level_figures, column.trial.measurements.all())
        }
        column.cost = trial_costs(trial=column.trial)
        column.simulated = column.cost.simulated or run_is_simulated(column.run)
    return compared


def level_sort_key(key: str) -> tuple:
    """Closed-loop levels first by concurrency, then request rates (inf last)."""
    kind, _, value = key.partition("=")
    load = float("inf") if value == "inf" else float(value)
    return (0 if kind == "c" else 1, load)


@dataclass(frozen=True)
class Cell:
    """One figure of a comparison and how it moved against its column's baseline."""

    value: Any
    delta_pct: float | None = None
    verdict: str = ""  # "better", "worse", "same" (under the threshold) or "" (no baseline)
    note: str = ""
    kind: str = "number"  # "number", "money" or "text": how ``display`` shows the value

    @property
    def display(self) -> str:
        if self.value is None:
            return "—"
        if self.kind == "money":
            return f"${self.value}"
        if self.kind == "number":
            return f"{float(self.value):,.2f}"
        return str(self.value)


def _verdict(value, baseline, better: str, threshold_pct: float) -> tuple[float | None, str]:
    if value is None or baseline is None or baseline == 0:
        return None, ""
    delta = (float(value) - float(baseline)) / abs(float(baseline)) * 100
    if abs(delta) < threshold_pct:
        return delta, "same"
    improved = delta < 0 if better == LOWER else delta > 0
    return delta, "better" if improved else "worse"


def _baselines(compared: list[ComparedTrial]) -> list[int | None]:
    # A column is measured against the first earlier column with the same serve config (the
    # same config in another run: a regression check), else against the first column.
    keys = [json.dumps(c.trial.serve_config or {}, sort_keys=True) for c in compared]
    baselines: list[int | None] = []
    for position, key in enumerate(keys):
        same = next((i for i in range(position) if keys[i] == key), None)
        baselines.append(same if same is not None else (None if position == 0 else 0))
    return baselines


def _setup_of(column: ComparedTrial) -> dict[str, str]:
    run, engine = column.run, run_engine(column.run)
    return {
        "Model": run.experiment.model.name,
        "GPU": f"{engine.gpu_count}× {run.pod_gpu_type or engine.gpu_type}",
        "Engine": "simulator"
        if run_is_simulated(run)
        else f"vLLM {engine.image_tag or '(default image)'}",
        "vLLM reported": str(run.agent_info.get("vllm_version") or "—"),
        "Outcome": column.trial.outcome
        + (f" ({column.trial.failure_class})" if column.trial.failure_class else ""),
    }


def comparison_table(compared: list[ComparedTrial], *, threshold_pct: float) -> dict:
    """The comparison page's content: setup and serve-flag rows (``differs`` marks a
    difference), per level the ``METRICS`` with each column's change against its baseline,
    and the cost per 1M output tokens. Simulated and measured figures are never ranked
    against each other."""
    baselines = _baselines(compared)

    def cells(values: list, better: str, kind: str = "number") -> list[Cell]:
        row = []
        for position, value in enumerate(values):
            base = baselines[position]
            if base is None:
                row.append(Cell(value, kind=kind))
                continue
            if compared[position].simulated != compared[base].simulated:
                row.append(Cell(value, note="simulated vs measured: not compared", kind=kind))
                continue
            delta, verdict = _verdict(value, values[base], better, threshold_pct)
            row.append(Cell(value, delta, verdict, kind=kind))
        return row

    setups = [_setup_of(column) for column in compared]
    setup_rows = [
        {"name": name, "values": values, "differs": len(set(values)) > 1}
        for name in setups[0]
        for values in [[setup[name] for setup in setups]]
    ]
    configs = [column.trial.serve_config or {} for column in compared]
    names = {name for config in configs for name in config}
    ordered = [n for n in protocol.SERVE_FLAGS if n in names] + sorted(
        names - set(protocol.SERVE_FLAGS)
    )
    flag_rows = [
        {"name": name, "values": values, "differs": len(set(values)) > 1}
        for name in ordered
        for values in [[_config_text(config.get(name, "(default)")) for config in configs]]
    ]
    level_keys = sorted({key for c in compared for key in c.levels}, key=level_sort_key)
    levels = []
    for key in level_keys:
        rows = []
        for metric in METRICS:
            values = [c.levels.get(key, {}).get(metric.key) for c in compared]
            rows.append({"metric": metric, "cells": cells(values, metric.better)})
        levels.append({"key": key, "rows": rows})
    steady = [c.cost.usd_per_million_output_tokens for c in compared]
    amortized = [c.cost.usd_per_million_output_tokens_cold_start_amortized for c in compared]
    cost_rows = [
        {"name": "$ per 1M output tokens", "cells": cells(steady, LOWER, "money")},
        {"name": "…with cold start amortized", "cells": cells(amortized, LOWER, "money")},
        {
            "name": "at level (best under SLOs)",
            "cells": [Cell(c.cost.load or "none", kind="text") for c in compared],
        },
    ]
    return {
        "columns": [
            {
                "column": column,
                "baseline": None if baselines[i] is None else compared[baselines[i]].ref,
                "baseline_position": baselines[i],
            }
            for i, column in enumerate(compared)
        ],
        "setup_rows": setup_rows,
        "flag_rows": flag_rows,
        "levels": levels,
        "cost_rows": cost_rows,
        "threshold_pct": threshold_pct,
        "mixed_simulated": len({c.simulated for c in compared}) > 1,
    }
