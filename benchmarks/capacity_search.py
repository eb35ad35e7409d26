"""How close the capacity search comes to the true capacity, on the simulator.

    .venv/bin/python -m benchmarks.capacity_search [--configs NAME,...] [--json OUT]

For each configuration (a model preset on a GPU profile, serve flags, fixed prompt and
output lengths, SLOs) every closed-loop level is simulated offline, in simulated time (no
server, no wall clock: the figures are the same on every machine), and judged the way the
product judges it: the load generator's steady window (``agents.loadgen.steady``), its
level result and SLO report (``agents.loadgen.results``).

- The truth: a dense sweep of every concurrency from 1 up, until a streak of failing levels
  the last of which misses by a clear margin (or ``--max-concurrency``); the capacity is the
  highest concurrency at which every SLO holds. Passing levels above the first failing one
  (non-monotonicity) are reported.
- The search: the product's fixed levels (1, 8, 64, 192) first, then ``CapacityPlanner``
  with the protocol's defaults (6 probes, bracket repeated). Reported: the capacity found,
  its error against the truth, probes, repeats and the GPU-seconds spent (the simulated
  duration of every level measured, drain included; the fixed levels apart).

The target (issue 16): within 10 % of the truth with at most 6 probes. The simulator is
deterministic, so a repeated level gives the same figures: repeats cost GPU-seconds here but
can never overturn a bracket end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from itertools import pairwise

from agents.engines.sim import SimRequest
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen.capacity import CapacityPlanner, level_passes, slo_margin
from agents.loadgen.records import RequestRecord
from agents.loadgen.results import level_result
from agents.loadgen.steady import ClosedLoopWindow, split_window
from agents.protocol import CapacitySearch
from agents.protocol.workload import parse_slos, steady_window_requests

FIXED_LEVELS = (1, 8, 64, 192)
# The product's defaults (agents.protocol.Workload).
REQUESTS_PER_LEVEL = 200
STEADY_MULTIPLE = 4.0
# The sweep stops after this many failing levels in a row, the last of which misses its
# SLOs by at least CLEAR_MARGIN (measured/target): far enough past the edge that a pass
# further up would be a surprise, not noise. (Should the search still find one, it counts.)
FAIL_STREAK = 8
CLEAR_MARGIN = 1.05
MAX_CONCURRENCY = 512
TARGET_ERROR_PCT = 10.0
TARGET_PROBES = 6


@dataclass(frozen=True)
class Config:
    """One serving configuration and the SLOs its capacity is judged at."""

    name: str
    model: str
    gpu: str
    flags: dict
    input_len: int
    output_len: int
    slos: str  # parse_slos text

    def describe(self) -> str:
        flags = ", ".join(f"{k}={v}" for k, v in self.flags.items()) or "default flags"
        return (
            f"{self.model} on {self.gpu} ({flags}), {self.input_len}/{self.output_len} "
            f"tokens, {self.slos}"
        )


_DEMO_SLOS = "ttft<500ms, tpot<50ms"
CONFIGS = {
    config.name: config
    for config in (
        # The demo's question: an 8B Llama on an H100 at three batch-token budgets.
        Config("h100-2k", "llama-3.1-8b", "H100", {"max_num_batched_tokens": 2048}, 1024, 128,
               _DEMO_SLOS),
        Config("h100-8k", "llama-3.1-8b", "H100", {"max_num_batched_tokens": 8192}, 1024, 128,
               _DEMO_SLOS),
        Config("h100-16k", "llama-3.1-8b", "H100", {"max_num_batched_tokens": 16384}, 1024,
               128, _DEMO_SLOS),
        # Another model and GPU, judged at p95.
        Config("l40s-mistral-p95", "mistral-7b", "L40S", {}, 512, 128,
               "ttft:p95<1000ms, tpot:p95<60ms"),
        # An attainment objective: 95 % of the requests meet both latency targets.
        Config("a100-qwen-attain", "qwen2.5-7b", "A100 80GB", {}, 1024, 128,
               "ttft<500ms, tpot<40ms, attainment>=95%"),
    )
}  # fmt: skip  # a table


@dataclass(frozen=True)
class Level:
    """How one level is measured: the window's size as the workload sets it."""

    requests_per_level: int = REQUESTS_PER_LEVEL
    steady_multiple: float = STEADY_MULTIPLE


def _record(request: SimRequest) -> RequestRecord:
    times = request.token_times
    return RequestRecord(
        index=request.id,
        requested_output_len=request.max_tokens,
        expected_prompt_len=request.prompt_len,
        start=request.arrival,
        finished=times[-1],
        ttft=times[0] - request.arrival,
        latency=times[-1] - request.arrival,
        itl=[later - earlier for earlier, later in pairwise(times)],
        chunks=len(times),
        output_tokens=request.output,
        prompt_tokens=request.prompt_len,
        success=True,
    )


def measure_level(config: Config, concurrency: int, level: Level = Level()) -> dict:
    """One closed-loop level of ``config`` at ``concurrency``, simulated offline: the load
    generator's level result (steady window, SLO report) plus ``gpu_seconds``, the simulated
    time the level held the GPU (ramp, window and drain)."""
    scheduler = make_scheduler(
        MODEL_PRESETS[config.model].facts, gpu_profile(config.gpu), config.flags
    )
    # The product's window: it opens when the first wave has finished and closes when
    # enough requests that started inside it have; then nothing more is sent (the drain).
    # ``agents.engines.sim.closed_loop`` sends a fixed number, so this loop stands in for it.
    # Its size is the workload's rule (agents.protocol.steady_window_requests):
    # requests_per_level, at least steady_multiple × the concurrency, and enough requests to
    # judge the SLOs' strictest percentile at their confidence.
    target = steady_window_requests(
        level.requests_per_level, level.steady_multiple, concurrency, parse_slos(config.slos)
    )
    window = ClosedLoopWindow(concurrency, target)
    now = 0.0
    issued = 0
    records: list[RequestRecord] = []

    def send() -> None:
        nonlocal issued
        request = SimRequest(issued, config.input_len, config.output_len, arrival=now)
        scheduler.add(request)
        issued += 1

    for _ in range(concurrency):
        send()
    while scheduler.has_work:
        step = scheduler.schedule(now)
        if step is None:
            ready = scheduler.ready_later(now)
            if ready is None:
                break  # nothing can run (never for these lengths): the rest count as failed
            now = ready
            continue
        now += step.duration
        for request in scheduler.finish(step, now):
            record = _record(request)
            records.append(record)
            window.finished(record, first_of_slot=request.id < concurrency)
            if not window.draining:
                send()
    split = split_window(records, window.start, window.end)
    if split is None:
        raise RuntimeError(f"{config.name} at concurrency {concurrency}: no window formed")
    result = level_result(
        {"concurrency": concurrency},
        split.measured,
        duration=split.end - split.start,
        slos=parse_slos(config.slos),
        throughput_records=split.ended_inside,
    )
    result["failed"] = issued - len(records)
    result["gpu_seconds"] = now
    return result


def _brief(result: dict) -> dict:
    """What this benchmark keeps of a level result."""
    return {
        "concurrency": result["concurrency"],
        "completed": result["completed"],
        "failed": result["failed"],
        "slo": result["slo"],
        "output_throughput": result["output_throughput"],
        "gpu_seconds": result["gpu_seconds"],
    }


@dataclass
class Truth:
    """What the measured levels say: the highest passing concurrency, and where it stops
    being monotone."""

    capacity: int | None  # the highest passing concurrency measured
    edge: int | None  # the last pass below the first fail (what the search brackets)
    first_fail: int | None
    passes_above_first_fail: list[int]
    swept: int
    gpu_seconds: float
    margins: list[float]  # the SLO margin of each concurrency swept, from 1

    @classmethod
    def of(cls, swept: dict[int, dict], extra: Iterable[dict] = ()) -> Truth:
        """From the sweep's levels and any ``extra`` measured beyond it."""
        levels = {r["concurrency"]: r for r in extra} | swept
        passing = [c for c, r in levels.items() if level_passes(r)]
        first_fail = min((c for c, r in levels.items() if not level_passes(r)), default=None)
        below = [c for c in passing if first_fail is None or c < first_fail]
        return cls(
            capacity=max(passing, default=None),
            edge=max(below, default=None),
            first_fail=first_fail,
            passes_above_first_fail=sorted(
                c for c in passing if first_fail is not None and c > first_fail
            ),
            swept=len(swept),
            gpu_seconds=sum(r["gpu_seconds"] for r in swept.values()),
            margins=[round(slo_margin(swept[c]), 4) for c in sorted(swept)],
        )


def dense_sweep(
    config: Config,
    *,
    level: Level = Level(),
    max_concurrency: int = MAX_CONCURRENCY,
    map_levels: Callable[..., Iterable[dict]] = map,
    chunk: int = 4,
) -> dict[int, dict]:
    """Every concurrency from 1 up, ``chunk`` at a time (``map_levels``: ``map`` or an
    executor's), until ``FAIL_STREAK`` failing levels in a row end clearly past the SLOs:
    each level's result by concurrency."""
    levels: dict[int, dict] = {}
    start = 1
    while start <= max_concurrency:
        batch = range(start, min(start + chunk, max_concurrency + 1))
        n = len(batch)
        results = map_levels(_measure_brief, [config] * n, batch, [level] * n)
        levels.update(zip(batch, results, strict=True))
        start = batch[-1] + 1
        last = [levels[c] for c in range(max(1, start - FAIL_STREAK), start)]
        if (
            len(last) == FAIL_STREAK
            and not any(level_passes(r) for r in last)
            and slo_margin(last[-1]) >= CLEAR_MARGIN
        ):
            break
    return levels


def _measure_brief(config: Config, concurrency: int, level: Level) -> dict:
    return _brief(measure_level(config, concurrency, level))


def run_search(
    config: Config,
    *,
    level: Level = Level(),
    known: dict[int, dict] | None = None,
    search: CapacitySearch | None = None,
) -> dict:
    """The product's search on ``config``: the fixed levels, then the planner's probes.
    ``known`` holds levels already simulated (the sweep's): the simulator is deterministic,
    so measuring one again would give the same result."""
    known = known if known is not None else {}
    planner = CapacityPlanner(search or CapacitySearch())

    def measure(concurrency: int) -> dict:
        if concurrency not in known:
            known[concurrency] = _measure_brief(config, concurrency, level)
        return known[concurrency]

    fixed_seconds = 0.0
    for concurrency in FIXED_LEVELS:
        result = measure(concurrency)
        planner.record(result)
        fixed_seconds += result["gpu_seconds"]
    chosen: list[int] = []
    search_seconds = 0.0
    while (load := planner.next_load()) is not None:
        result = measure(int(load))
        planner.record(result, probe=True)
        chosen.append(int(load))
        search_seconds += result["gpu_seconds"]
    outcome = planner.outcome()
    outcome["chosen"] = chosen
    outcome["fixed_gpu_seconds"] = fixed_seconds
    outcome["search_gpu_seconds"] = search_seconds
    return outcome


def evaluate(
    config: Config,
    *,
    level: Level = Level(),
    max_concurrency: int = MAX_CONCURRENCY,
    map_levels: Callable[..., Iterable[dict]] = map,
) -> dict:
    """The truth and the search's answer for one configuration, and the error between.
    A level the search measured beyond the sweep counts towards the truth too."""
    swept = dense_sweep(config, level=level, max_concurrency=max_concurrency, map_levels=map_levels)
    known = dict(swept)
    found = run_search(config, level=level, known=known)
    truth = Truth.of(swept, (r for c, r in known.items() if c not in swept))
    capacity = found["capacity"]
    error = None
    if truth.capacity and capacity is not None:
        error = 100.0 * (capacity - truth.capacity) / truth.capacity
    return {
        "config": config.name,
        "describe": config.describe(),
        "truth": asdict(truth),
        "search": found,
        "error_pct": error,
        "target_met": (
            error is not None
            and abs(error) <= TARGET_ERROR_PCT
            and found["probes"] <= TARGET_PROBES
        ),
    }


def _table(rows: list[dict]) -> str:
    lines = [
        "| config | truth | edge / first fail | found | bracket | error | probes (chosen) "
        "| repeats | stop | search GPU-s | fixed GPU-s | sweep levels, GPU-s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        truth, found = row["truth"], row["search"]
        error = "n/a" if row["error_pct"] is None else f"{row['error_pct']:+.1f} %"
        above = truth["passes_above_first_fail"]
        odd = f" (passes above: {above})" if above else ""
        bracket = f"[{_int(found['bracket_low'])}, {_int(found['bracket_high'])}]"
        chosen = ", ".join(str(c) for c in found["chosen"])
        lines.append(
            f"| {row['config']} | {truth['capacity']}{odd} | {truth['edge']} / "
            f"{truth['first_fail']} | {_int(found['capacity'])} | {bracket} | {error} | "
            f"{found['probes']} ({chosen}) | {found['repeats']} | {found['stop_reason']} | "
            f"{found['search_gpu_seconds']:,.0f} | {found['fixed_gpu_seconds']:,.0f} | "
            f"{truth['swept']}, {truth['gpu_seconds']:,.0f} |"
        )
    return "\n".join(lines)


def _int(value: float | None) -> str:
    return "–" if value is None else str(int(value))


def summary(rows: list[dict]) -> dict:
    """Mean and largest absolute error, most probes, and whether the target holds."""
    errors = [abs(row["error_pct"]) for row in rows if row["error_pct"] is not None]
    return {
        "configs": len(rows),
        "mean_abs_error_pct": sum(errors) / len(errors) if errors else None,
        "max_abs_error_pct": max(errors, default=None),
        "max_probes": max(row["search"]["probes"] for row in rows),
        "target_met": all(row["target_met"] for row in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names")
    parser.add_argument("--json", metavar="OUT", help="write every figure as JSON here")
    parser.add_argument("--max-concurrency", type=int, default=MAX_CONCURRENCY)
    parser.add_argument("--requests-per-level", type=int, default=REQUESTS_PER_LEVEL)
    parser.add_argument("--steady-multiple", type=float, default=STEADY_MULTIPLE)
    parser.add_argument(
        "--jobs", type=int, default=len(os.sched_getaffinity(0)), help="processes for the sweep"
    )
    args = parser.parse_args(argv)
    names = [name.strip() for name in args.configs.split(",") if name.strip()]
    unknown = [name for name in names if name not in CONFIGS]
    if unknown:
        parser.error(f"unknown config(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    level = Level(args.requests_per_level, args.steady_multiple)
    began = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name in names:
            config = CONFIGS[name]
            print(f"{name}: {config.describe()}", flush=True)
            rows.append(
                evaluate(
                    config,
                    level=level,
                    max_concurrency=args.max_concurrency,
                    map_levels=pool.map,
                )
            )
    elapsed = time.perf_counter() - began
    # The sweep's processes are counted once the pool has ended (RUSAGE_CHILDREN).
    cpu = sum(
        usage.ru_utime + usage.ru_stime
        for usage in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )
    print()
    print(_table(rows))
    totals = summary(rows)
    mean = totals["mean_abs_error_pct"]
    worst = totals["max_abs_error_pct"]
    print(
        f"\nmean |error| {'n/a' if mean is None else f'{mean:.1f} %'}, "
        f"max |error| {'n/a' if worst is None else f'{worst:.1f} %'}, "
        f"max probes {totals['max_probes']}; target (≤ {TARGET_ERROR_PCT:g} %, "
        f"≤ {TARGET_PROBES} probes) {'met' if totals['target_met'] else 'MISSED'}; "
        f"{elapsed:.0f} s wall, {cpu:.0f} s CPU, {args.jobs} process(es)"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(
                {"rows": rows, "summary": totals, "wall_seconds": elapsed, "cpu_seconds": cpu},
                out,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
