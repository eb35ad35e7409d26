"""What each search strategy spends and how often it finds the right configuration.

    .venv/bin/python -m benchmarks.search_spend [--worlds 10] [--processes 2] [--quick]

Ground truth is a simulator *world* per seed whose constants differ from the search's own
simulator — compute and memory efficiency ±20 %, a fixed step overhead of 0.5–3 ms, a host
cost per request in the step of 5–60 µs, an all-reduce latency of 8–30 µs, a server
front-end time per request of 2–20 ms — so the search
cannot peek: it predicts with the defaults and measures in the world. For each model/GPU
pair a 3 × 3 × 3 grid (``max_num_batched_tokens`` × ``max_num_seqs`` ×
``gpu_memory_utilization``) is searched by every strategy in every world, and the exhaustive
search's winner in that world is the truth. Per strategy it prints the GPU time spent as a
share of the exhaustive run's (cold starts included), and the share of worlds where the
configuration chosen is the exhaustive winner or within 5 % of its cost at the SLOs (its
throughput at capacity ≥ the winner's ÷ 1.05). Deterministic: the same arguments print the
same table.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from agents.hardware import DEFAULT_EFFICIENCY, MODEL_PRESETS, Efficiency, gpu_profile
from agents.loadgen import BenchConfig, RandomPrompts
from agents.protocol import CapacitySearch, expand_serve_grid, parse_slos
from agents.search import STRATEGIES, SearchSpec, run_search
from agents.search.simulated import SimulatedTrials

GRID = {
    "max_num_batched_tokens": [512, 2048, 8192],
    "max_num_seqs": [16, 64, 256],
    "gpu_memory_utilization": [0.7, 0.85, 0.95],
}
WITHIN = 1.05  # "within 5 % of the winner's cost"


@dataclass(frozen=True)
class Pair:
    model: str
    gpu: str
    flags: tuple[tuple[str, object], ...]
    input_len: int
    output_len: int
    slos: str


PAIRS = (
    Pair("llama-3.1-8b", "H100", (), 1024, 256, "ttft:p95<1000ms, tpot:p95<25ms"),
    Pair("mistral-7b", "A100 80GB", (), 2048, 128, "ttft:p95<2000ms, tpot:p95<40ms"),
    Pair(
        "llama-3.1-70b",
        "H200",
        (("tensor_parallel_size", 2),),
        512,
        256,
        "ttft:p95<1500ms, tpot:p95<50ms",
    ),
)


def world(seed: int) -> Efficiency:
    """One world's constants (module docstring), drawn from ``seed``."""
    rng = random.Random(seed)
    return Efficiency(
        flops=DEFAULT_EFFICIENCY.flops * rng.uniform(0.8, 1.2),
        bandwidth=min(1.0, DEFAULT_EFFICIENCY.bandwidth * rng.uniform(0.8, 1.2)),
        step_overhead_s=rng.uniform(0.0005, 0.003),
        per_sequence_s=rng.uniform(5e-6, 60e-6),
        allreduce_latency_s=rng.uniform(8e-6, 30e-6),
        request_overhead_s=rng.uniform(0.002, 0.02),
    )


def bench_for(pair: Pair, quick: bool) -> BenchConfig:
    return BenchConfig(
        base_url="simulator://offline",
        model=pair.model,
        source=RandomPrompts(pair.input_len, pair.output_len, 0.2),
        levels=({"concurrency": 8},),
        num_prompts=30 if quick else 60,
        steady_multiple=2.0,
        slos=parse_slos(pair.slos),
        capacity=CapacitySearch(max_probes=4 if quick else 6),
        metrics_url=None,
    )


def specs(count: int) -> dict[str, SearchSpec]:
    """Each strategy as a team would set it: bayes gets a third of the grid's trials."""
    return {
        name: SearchSpec(
            strategy=name, max_trials=math.ceil(count / 3) if name == "bayes" else None
        )
        for name in STRATEGIES
    }


def run_pair(job: tuple[int, int, bool]) -> list[dict]:
    """Every strategy in worlds ``seed`` of pair ``pair_index``: one row per strategy."""
    pair_index, seed, quick = job
    pair = PAIRS[pair_index]
    configs = [config | dict(pair.flags) for config in expand_serve_grid(GRID)]
    trials = SimulatedTrials(
        MODEL_PRESETS[pair.model].facts,
        gpu_profile(pair.gpu),
        configs,
        bench_for(pair, quick),
        world(1000 * pair_index + seed),
    )
    truth = run_search(SearchSpec(strategy="exhaustive"), configs, trials)
    best = truth.outcomes[truth.winner].value if truth.winner is not None else None
    rows = []
    for name, spec in specs(len(configs)).items():
        result = truth if name == "exhaustive" else run_search(spec, configs, trials)
        chosen = result.outcomes[result.winner].value if result.winner is not None else None
        # The chosen configuration's throughput in the world at full effort (what the team
        # would get), whatever the search measured it at.
        right = (
            best is None
            if chosen is None
            else best is not None and trials.measure(result.winner, 1.0).value * WITHIN >= best
        )
        rows.append(
            {
                "pair": f"{pair.model} on {pair.gpu}",
                "strategy": name,
                "spent_share": result.spent_gpu_s / truth.spent_gpu_s,
                "right": right,
                "measurements": result.measurements,
                "error_before": result.error_uncalibrated_pct,
                "error_after": result.error_calibrated_pct,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worlds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="smaller levels (a smoke run)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    jobs = [(p, seed, args.quick) for p in range(len(PAIRS)) for seed in range(args.worlds)]
    with ProcessPoolExecutor(args.processes) as pool:
        rows = [row for result in pool.map(run_pair, jobs) for row in result]
    print(f"{len(PAIRS)} model/GPU pairs × {args.worlds} worlds, 3 × 3 × 3 grid ({GRID})")
    print()
    print(
        "| strategy | GPU time vs exhaustive (mean) | worst world "
        "| right (≤ 5 % of the best cost) | measurements (mean) |"
    )
    print("|---|---|---|---|---|")
    for name in STRATEGIES:
        mine = [row for row in rows if row["strategy"] == name]
        shares = [row["spent_share"] for row in mine]
        right = sum(row["right"] for row in mine)
        print(
            f"| {name} | {100 * statistics.fmean(shares):.0f} % | {100 * max(shares):.0f} % | "
            f"{right}/{len(mine)} ({100 * right / len(mine):.0f} %) | "
            f"{statistics.fmean(row['measurements'] for row in mine):.1f} |"
        )
    print()
    print("Per pair (share of GPU time / right):")
    for pair in dict.fromkeys(row["pair"] for row in rows):
        parts = []
        for name in STRATEGIES:
            mine = [row for row in rows if row["strategy"] == name and row["pair"] == pair]
            share = statistics.fmean(row["spent_share"] for row in mine)
            right = sum(row["right"] for row in mine)
            parts.append(f"{name} {100 * share:.0f} % / {right}/{len(mine)}")
        print(f"- {pair}: " + "; ".join(parts))
    calibrated = [row for row in rows if row["error_after"] is not None]
    if calibrated:
        before = statistics.fmean(row["error_before"] for row in calibrated)
        after = statistics.fmean(row["error_after"] for row in calibrated)
        print()
        print(
            f"prune's calibration: prediction error of the value (throughput at capacity) of "
            f"configurations measured after it, {before:.0f} % with the default constants → "
            f"{after:.0f} % calibrated ({len(calibrated)} searches)"
        )
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
