"""How a benchmark looks to a person (rich progress and tables) and on disk (JSON, JSONL).

Guarantees:

- The live progress redraws at most four times a second from rich's own thread, so drawing
  costs the timing event loop next to nothing; it is shown only on a terminal. A bar never
  counts past its total (a steady level may run longer than its estimate: the total grows),
  shows the time left, and when its level ends it is printed once, finished, and leaves the
  live area: what is printed after it (the level's table, a capacity search's answer) comes
  after it on the screen.
- Every level gets one table: latencies in ms by percentile, with vLLM's names (and TPOT
  labelled, since GuideLLM calls the same thing ITL), throughput, errors by kind, a loud
  warning when served output lengths differ from the requested ones, and the server's view.
- ``write_json`` writes ``{"config": …, "levels": […], "interrupted": …}`` atomically;
  ``append_records`` adds one JSON line per request, tagged with its level.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

from rich.console import Console, Group
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from agents.loadgen.events import LevelFinished, LevelStarted, RequestDone, level_label
from agents.loadgen.records import RequestRecord
from agents.protocol.slo_verdicts import MET, MISSED, VERDICT_WORDS, check_verdict

_METRIC_LABELS = {
    "ttft": "TTFT",
    "tpot": "TPOT (per-request; GuideLLM's 'ITL')",
    "itl": "ITL (pooled gaps)",
    "e2el": "E2EL",
}


class ProgressView:
    """A progress bar per level, fed with the engine's events."""

    def __init__(self, console: Console, *, hidden: bool = False):
        self.console = console
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            refresh_per_second=4,
            disable=hidden or not console.is_terminal,
        )
        self._tasks: dict[int, TaskID] = {}

    def __enter__(self) -> ProgressView:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def handle(self, event: object) -> None:
        if isinstance(event, LevelStarted):
            self._tasks[event.index] = self.progress.add_task(
                level_label(event.level), total=event.total, status=""
            )
        elif isinstance(event, RequestDone):
            task = self._tasks.get(event.index)
            if task is not None:
                rate = event.output_tokens / event.elapsed if event.elapsed > 0 else 0.0
                status = f"{rate:,.0f} tok/s"
                if event.failed:
                    status += f" [red]{event.failed} failed"
                done = event.completed + event.failed
                total = self.progress.tasks[self._index(task)].total
                # The total is an estimate (a steady level runs until its window is full):
                # past it, the level has done at least this many.
                grown = None if total is None or done <= total else done
                self.progress.update(task, completed=done, status=status, total=grown or total)
        elif isinstance(event, LevelFinished):
            task = self._tasks.pop(event.index, None)
            if task is not None:
                done = event.result.completed + event.result.failed
                self.progress.update(task, completed=done, total=done)
                if not self.progress.disable:
                    finished = self.progress.tasks[self._index(task)]
                    self.progress.console.print(self.progress.make_tasks_table([finished]))
                self.progress.remove_task(task)
                self.progress.refresh()  # the live area without it, before anything else

    def _index(self, task: TaskID) -> int:
        return next(i for i, shown in enumerate(self.progress.tasks) if shown.id == task)


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}"


def _number(value: float | None, unit: str = "") -> str:
    return "–" if value is None else f"{value:,.2f}{unit}"


def capacity_line(capacity: dict) -> str:
    """What a capacity search found, in one line (SIMULATED first when it was)."""
    unit = "users" if capacity["axis"] == "concurrency" else "req/s"
    found = capacity.get("capacity")
    high = capacity.get("bracket_high")
    label = "SIMULATED " if capacity.get("simulated") else ""
    if found is None:
        return f"{label}capacity at the SLOs: none — even {high:g} {unit} missed them"
    bracket = f"[{found:g}, {'–' if high is None else f'{high:g}'}]"
    missed = capacity.get("first_missed")
    if missed is not None and missed != high:
        bracket += f", first missed at {missed:g}"
    throughput = capacity.get("output_throughput")
    return (
        f"{label}capacity at the SLOs: {found:g} {unit} (bracket {bracket}, {capacity['probes']} "
        f"probes, {capacity['stop_reason']})"
        + ("" if throughput is None else f", {throughput:,.1f} output tok/s there")
    )


def level_table(result: dict) -> Group:
    """The human view of one level's result."""
    title = ("SIMULATED " if result.get("simulated") else "") + level_label(result)
    if "burstiness" in result:
        title += f", burstiness {result['burstiness']:g}"
    latency = Table(title=f"{title} — latency (ms)", title_justify="left")
    latency.add_column("metric")
    for column in ("mean", "median", "p90", "p95", "p99", "std"):
        latency.add_column(column, justify="right")
    for metric, label in _METRIC_LABELS.items():
        latency.add_row(
            label,
            *(
                _ms(result[f"{stat}_{metric}_ms"])
                for stat in ("mean", "median", "p90", "p95", "p99", "std")
            ),
        )
    summary = Table(show_header=False, box=None, padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row(
        "requests",
        f"{result['completed']} completed, {result['failed']} failed "
        f"in {result['duration']:.2f} s (max {result['max_concurrent_requests']} in flight)",
    )
    summary.add_row(
        "throughput",
        f"{result['request_throughput']:.2f} req/s, "
        f"{result['output_throughput']:,.1f} output tok/s "
        f"(peak {result['max_output_tokens_per_s']:,} in 1 s), "
        f"{result['total_token_throughput']:,.1f} total tok/s",
    )
    summary.add_row(
        "tokens", f"{result['total_input_tokens']:,} in, {result['total_output_tokens']:,} out"
    )
    if result["request_goodput"] is not None:
        summary.add_row("goodput", f"{result['request_goodput']:.2f} req/s within the SLOs")
    if result.get("window"):
        window = result["window"]
        whole = result["whole_level"]
        summary.add_row(
            "steady window",
            f"{window['start_s']:.2f}–{window['end_s']:.2f} s, {window['requests']} requests "
            f"(ramp {window['ramp_requests']}, drain {window['drain_requests']}); the whole "
            f"level: {whole['completed']} requests, {whole['output_throughput']:,.1f} output "
            "tok/s",
        )
    for name, slo in (result.get("slo") or {}).items():
        decided = check_verdict(slo)
        colour = {MET: "green", MISSED: "red"}.get(decided, "yellow")
        verdict = f"[{colour}]{VERDICT_WORDS[decided]}"
        if slo.get("judged") is not None:
            verdict += f" ({slo['beyond']} of {slo['judged']} beyond)"
        if name == "attainment":
            measured = "–" if slo.get("value") is None else f"{slo['value']:.1f} %"
            summary.add_row("SLO attainment", f"{measured} vs ≥ {slo['target']:g} %: {verdict}")
            continue
        percentile = slo.get("percentile", 99)
        value = slo.get("value", slo.get("p99"))
        summary.add_row(
            f"SLO {name}", f"p{percentile} {_ms(value)} vs {slo['target']:g}: {verdict}"
        )
    for kind, error in result["errors"].items():
        summary.add_row(f"[red]error {kind}", f"{error['count']} × {error['sample']}")
    mismatch = result["output_len_mismatch"]
    if mismatch is not None:
        summary.add_row(
            "[bold red]OUTPUT LENGTH",
            f"[red]{mismatch['requests']} requests served {mismatch['served_tokens']:,} tokens "
            f"instead of {mismatch['requested_tokens']:,} (e.g. {mismatch['sample']}): "
            "the server ignored ignore_eos or capped max_tokens; latencies are not comparable",
        )
    if result.get("usage_missing"):
        summary.add_row(
            "[yellow]usage missing",
            f"{result['usage_missing']} responses had no usage: output tokens counted as "
            "content messages",
        )
    server = result.get("server")
    if server:
        summary.add_row("server", _server_line(server))
    return Group(latency, summary)


def _server_line(server: dict) -> str:
    parts = []
    kv = server.get("kv_cache_usage_perc")
    if kv:
        parts.append(f"KV cache max {kv['max']:.0%} mean {kv['mean']:.0%}")
    for name, label in (("num_requests_running", "running"), ("num_requests_waiting", "waiting")):
        gauge = server.get(name)
        if gauge:
            parts.append(f"{label} max {gauge['max']:g} mean {gauge['mean']:.1f}")
    if server.get("num_preemptions") is not None:
        parts.append(f"preemptions {server['num_preemptions']:g}")
    if server.get("prefix_cache_hit_rate") is not None:
        parts.append(f"prefix-cache hits {server['prefix_cache_hit_rate']:.0%}")
    if server.get("scrape_errors"):
        parts.append(f"[yellow]{server['scrape_errors']} failed scrapes")
    return ", ".join(parts) or "no vLLM metrics"


def write_json(
    path: Path,
    config: dict,
    levels: list[dict],
    *,
    interrupted: bool,
    capacity: dict | None = None,
    extra: dict | None = None,
) -> None:
    """Writes the results file atomically (a reader never sees half a file); ``capacity``
    is what a capacity search found, when one ran; ``extra``: more top-level keys."""
    document = {"config": config, "levels": levels, "interrupted": interrupted}
    if capacity is not None:
        document["capacity"] = capacity
    document.update(extra or {})
    path = Path(path)
    handle, temporary = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            json.dump(document, file, indent=2)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def append_records(path: Path, level: dict, records: Iterable[RequestRecord]) -> None:
    """Appends one JSON line per request of a finished level."""
    with Path(path).open("a", encoding="utf-8") as file:
        for record in records:
            file.write(json.dumps(level | record.as_json()) + "\n")
