"""Reads behind the comparison page: two or more runs or trials side by side.

Guarantees:
- the selection is read from the organization of the membership only: a run or trial of
  another organization is answered exactly like a missing one;
- a bad selection raises ``CompareInputError`` naming the part that is wrong, never a 500;
- simulated and measured figures are never ranked against each other;
- each column names the image its trial ran on (``Trial.image_tag``), in its label too when
  the compared trials ran on several (``v0.12.0 · max_num_seqs=64``), so one configuration
  on two images is two columns told apart;
- a level figure that carries a 95 % interval (``ci95``) in both columns says how it moved
  in words with the change's interval (``figures.deltas``: "better by 12 %
  (CI 8–16 %)", "within noise (CI −3–+4 %)"), and a change within noise is never
  highlighted, whatever the threshold;
- the number of queries does not grow with the number of measurements compared.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Prefetch

from agents.protocol import LEVEL_RESULT_KEY
from figures.deltas import WITHIN_NOISE, Interval, figure_delta
from runs.access import scoped
from runs.models import Measurement, Membership, Run, Trial
from runs.run_as_started import run_engine, run_is_simulated
from runs.selectors.level_results import stored_level_result
from runs.selectors.run_answer import capacity_usd_per_million
from runs.selectors.run_levels import (
    HIGHER,
    LOWER,
    METRICS,
    config_text,
    flags_in_order,
    image_config_labels,
    level_key,
    level_row,
    level_sort_key,
)
from runs.selectors.trial_costs import trial_costs

MAX_COMPARED_TRIALS = 16
# The ``LevelResult`` field behind each compared figure: the key of its interval in ``ci95``.
_INTERVAL_FIELD = {
    "ttft_p50": LEVEL_RESULT_KEY.median_ttft_ms,
    "ttft_p99": LEVEL_RESULT_KEY.p99_ttft_ms,
    "itl_p50": LEVEL_RESULT_KEY.median_itl_ms,
    "itl_p99": LEVEL_RESULT_KEY.p99_itl_ms,
    "tpot_p50": LEVEL_RESULT_KEY.median_tpot_ms,
    "tpot_p99": LEVEL_RESULT_KEY.p99_tpot_ms,
    "output_throughput": LEVEL_RESULT_KEY.output_throughput,
}
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
    # {level key: {metric key: its 95 % interval}}, for the figures whose result has one.
    intervals: dict[str, dict[str, Interval]] = field(default_factory=dict)
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
    labels = image_config_labels([column.trial for column in compared])
    for column, label in zip(compared, labels, strict=True):
        column.label = label
        column.levels = {
            level["key"]: level for level in map(level_row, column.trial.measurements.all())
        }
        column.intervals = {
            level_key(measurement): _intervals(measurement.result)
            for measurement in column.trial.measurements.all()
        }
        column.cost = trial_costs(trial=column.trial)
        column.simulated = column.cost.simulated or run_is_simulated(column.run)
    return compared


def _intervals(stored: dict) -> dict[str, Interval]:
    # Results stored before intervals were sent have none, nor does every figure (ITL).
    intervals = stored_level_result(stored).ci95 or {}
    return {
        key: (interval.low, interval.high)
        for key, name in _INTERVAL_FIELD.items()
        if (interval := intervals.get(name)) is not None
    }


@dataclass(frozen=True)
class Cell:
    """One figure of a comparison and how it moved against its column's baseline."""

    value: Any
    delta_pct: float | None = None
    verdict: str = ""  # "better", "worse", "same" (under the threshold) or "" (no baseline)
    note: str = ""
    kind: str = "number"  # "number", "money" or "text": how ``display`` shows the value
    # The move with its interval in words ("better by 12 % (CI 8–16 %)", "within noise (…)"),
    # when both this figure and its baseline's carry a 95 % interval.
    interval_text: str = ""

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
    # A column is measured against the first earlier column with the same serve config on the
    # same image (the same config in another run: a regression check), else with the same
    # serve config (another image: a version check), else against the first column.
    configs = [json.dumps(c.trial.serve_config or {}, sort_keys=True) for c in compared]
    images = [c.trial.image_tag for c in compared]
    baselines: list[int | None] = []
    for position, config in enumerate(configs):
        earlier = [i for i in range(position) if configs[i] == config]
        same = next((i for i in earlier if images[i] == images[position]), None)
        if same is None:
            same = earlier[0] if earlier else None
        baselines.append(same if same is not None else (None if position == 0 else 0))
    return baselines


def _vllm_reported(run: Run, trial: Trial) -> str:
    # A run over several images has one pod per tag: a trial of an image the current pod does
    # not run was measured on a pod the run has left, whose agent's report it keeps.
    current = run.pod_image_tag
    if trial.image_tag and current and trial.image_tag != current:
        left = [
            pod
            for pod in run.pod_history
            if pod.get("image_tag") == trial.image_tag and pod.get("vllm_version")
        ]
        return str(left[-1]["vllm_version"]) if left else "—"
    return str(run.agent_info.get("vllm_version") or "—")


def _setup_of(column: ComparedTrial) -> dict[str, str]:
    run, trial, engine = column.run, column.trial, run_engine(column.run)
    simulated = run_is_simulated(run)
    return {
        "Model": run.experiment.model.name,
        "GPU": f"{engine.gpu_count}× {run.pod_gpu_type or engine.gpu_type}",
        "Engine": "simulator" if simulated else "vLLM",
        # The trial's own image: a run over several tags froze the first as its engine's.
        "Image": "—" if simulated else trial.image_tag or engine.image_tag or "(default image)",
        "vLLM reported": _vllm_reported(run, trial),
        "Outcome": column.trial.outcome
        + (f" ({column.trial.failure_class})" if column.trial.failure_class else ""),
    }


def _traffic_rows(key: str, compared: list[ComparedTrial], cells: Callable) -> list[dict]:
    """A level's rows beyond ``METRICS``, each only where a column has it: the server's
    prefix-cache hit rate and a session level's TTFT by turn (compared like the metrics:
    ``cells(values, better)``), and, shown but never ranked since they describe the load
    sent rather than the server, a trace level's replay and the send lateness."""
    levels = [c.levels.get(key, {}) for c in compared]
    rows = []
    rates = [level.get("prefix_cache_hit_rate") for level in levels]
    if any(rate is not None for rate in rates):
        percents = [None if rate is None else rate * 100 for rate in rates]
        rows.append(
            {"label": "Prefix-cache hit rate", "unit": "%", "cells": cells(percents, HIGHER)}
        )
    turns = [{t["turn"]: t for t in level.get("turns") or ()} for level in levels]
    for turn in sorted({n for by_turn in turns for n in by_turn}):
        ttft = [by_turn.get(turn, {}).get("median_ttft_ms") for by_turn in turns]
        rows.append({"label": f"Turn {turn}: TTFT p50", "unit": "ms", "cells": cells(ttft, LOWER)})
    replays = [_replay_text(level) for level in levels]
    if any(replays):
        rows.append({"label": "Trace replay", "unit": "", "cells": _text_cells(replays)})
    lateness = [level.get("send_lateness") for level in levels]
    if any(lateness):
        shown = [late and f"{late['p99_ms']:.2f} / {late['max_ms']:.2f}" for late in lateness]
        rows.append({"label": "Sends late p99 / max", "unit": "ms", "cells": _text_cells(shown)})
    return rows


def _replay_text(level: dict) -> str | None:
    """A trace level's replay in words (``240 requests at the trace's times × 0.50``), as
    the run page says it; None for a level that replayed no trace."""
    replay = level.get("replay")
    if replay is None:
        return None
    sent = f"{replay['requests']} requests"
    if replay.get("time_scale") is not None:
        return f"{sent} at the trace's times × {replay['time_scale']:.2f}"
    return f"{sent} in order" if level.get("concurrency") is not None else f"{sent} all at once"


def _text_cells(values: list[str | None]) -> list[Cell]:
    return [Cell(value or None, kind="text") for value in values]


def comparison_table(compared: list[ComparedTrial], *, threshold_pct: float) -> dict:
    """The comparison page's content: setup and serve-flag rows (``differs`` marks a
    difference), per level the ``METRICS`` with each column's change against its baseline,
    and the cost per 1M output tokens. Simulated and measured figures are never ranked
    against each other."""
    baselines = _baselines(compared)

    def cells(
        values: list, better: str, kind: str = "number", intervals: list | None = None
    ) -> list[Cell]:
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
            text = ""
            if delta is not None and intervals and intervals[position] and intervals[base]:
                moved = figure_delta(
                    new=float(value),
                    base=float(values[base]),
                    new_interval=intervals[position],
                    base_interval=intervals[base],
                    higher_is_better=better == HIGHER,
                )
                if moved.interval_pct is not None:
                    text = moved.text
                    # A move inside the noise is no change, however large its point.
                    verdict = "same" if moved.verdict == WITHIN_NOISE else verdict
            row.append(Cell(value, delta, verdict, kind=kind, interval_text=text))
        return row

    setups = [_setup_of(column) for column in compared]
    setup_rows = [
        {"name": name, "values": values, "differs": len(set(values)) > 1}
        for name in setups[0]
        for values in [[setup[name] for setup in setups]]
    ]
    configs = [column.trial.serve_config or {} for column in compared]
    flag_rows = [
        {"name": name, "values": values, "differs": len(set(values)) > 1}
        for name in flags_in_order(configs)
        for values in [[config_text(config.get(name, "(default)")) for config in configs]]
    ]
    level_keys = sorted({key for c in compared for key in c.levels}, key=level_sort_key)
    levels = []
    for key in level_keys:
        rows = []
        for metric in METRICS:
            values = [c.levels.get(key, {}).get(metric.key) for c in compared]
            intervals = [c.intervals.get(key, {}).get(metric.key) for c in compared]
            cells_ = cells(values, metric.better, "number", intervals)
            rows.append({"label": metric.label, "unit": metric.unit, "cells": cells_})
        levels.append({"key": key, "rows": rows + _traffic_rows(key, compared, cells)})
    steady = [c.cost.usd_per_million_output_tokens for c in compared]
    amortized = [c.cost.usd_per_million_output_tokens_cold_start_amortized for c in compared]
    # The answer's figure first, where a search found a capacity: the same number the run
    # page, the reports and the CLI give for this trial (``capacity_usd_per_million``).
    at_capacity = [
        capacity_usd_per_million(
            c.trial.capacity, pod_usd_per_hr=c.cost.pod_usd_per_hr, share=c.cost.share
        )
        for c in compared
    ]
    capacity_row = {
        "name": "$ per 1M output tokens at capacity",
        "cells": cells(at_capacity, LOWER, "money"),
    }
    capacity_rows = [capacity_row] if any(value is not None for value in at_capacity) else []
    cost_rows = [
        *capacity_rows,
        {
            "name": "$ per 1M output tokens at the best fixed level",
            "cells": cells(steady, LOWER, "money"),
        },
        {"name": "…with cold start amortized", "cells": cells(amortized, LOWER, "money")},
        {
            "name": "at level (best under SLOs)",
            "cells": [Cell(c.cost.load or "none", kind="text") for c in compared],
        },
        {
            # One rule for every cost above (runs.costs.GpuShare): per GPU the trial uses.
            "name": "GPUs the cost counts",
            "cells": [Cell(c.cost.priced_for or "the endpoint", kind="text") for c in compared],
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
