"""How many concurrent streams the simulator serves on one core before its timing slips.

Run from the repository root (Linux; the simulator is pinned to CPU 1, the load generator to
CPU 0):

    .venv/bin/python -m benchmarks.sim_capacity [--levels 16,64,256,512,1024] [--output-len 128]

For each concurrency a fresh simulator (Llama 3.1 8B on an H100, ``--speed 1``, start-up
skipped) serves a closed-loop level of the load generator. The simulator times every engine
step against its absolute deadline; a step whose tokens are written more than 1 ms after the
deadline is "late". Printed per level: steps, late steps (%), the worst slip, the simulated
median ITL, and the output tokens per second.

The capacity is the largest concurrency with fewer than 1 % late steps.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import urllib.request
from pathlib import Path

from agents.engines.sim.engine import sim_engine
from agents.loadgen import BenchConfig, RandomPrompts, event_loop_runner, run_levels

_METRIC = re.compile(r"^benchsite:(sim_\w+)\{[^}]*\} (\S+)$", re.MULTILINE)


def _sim_metrics(base_url: str) -> dict[str, float]:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    return {name: float(value) for name, value in _METRIC.findall(text)}


def run_level(concurrency: int, *, output_len: int, input_len: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as workdir:
        engine = sim_engine(
            model_spec="llama-3.1-8b",
            gpu="H100",
            config={"max_model_len": 4096, "max_num_seqs": 1024},
            workdir=Path(workdir),
            served_model_name="sim",
            speed=1.0,
            startup_speed=1000.0,
        )
        engine.argv[:0] = ["taskset", "-c", "1"]
        engine.start()
        try:
            config = BenchConfig(
                base_url=engine.base_url,
                model="sim",
                source=RandomPrompts(input_len=input_len, output_len=output_len),
                levels=({"concurrency": concurrency},),
                num_prompts=concurrency * rounds,
            )
            with event_loop_runner() as runner:
                (level,) = [level.as_json() for level in runner.run(run_levels(config))]
            sim = _sim_metrics(engine.base_url)
        finally:
            engine.stop()
    steps = sim.get("sim_steps_total", 0)
    late = sim.get("sim_steps_late_total", 0)
    return {
        "concurrency": concurrency,
        "steps": int(steps),
        "late_pct": 100 * late / steps if steps else float("nan"),
        "max_slip_ms": 1000 * sim.get("sim_max_step_slip_seconds", float("nan")),
        "median_itl_ms": level["median_itl_ms"],
        "output_tokens_per_s": level["output_throughput"],
        "failed": level["failed"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="16,64,256,512,1024")
    parser.add_argument("--output-len", type=int, default=128)
    parser.add_argument("--input-len", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2, help="requests per client")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})
    print("| c | steps | late steps (>1 ms) | worst slip | median ITL | output tok/s | failed |")
    print("|---|---|---|---|---|---|---|")
    capacity = 0
    for concurrency in (int(v) for v in args.levels.split(",")):
        row = run_level(
            concurrency, output_len=args.output_len, input_len=args.input_len, rounds=args.rounds
        )
        print(
            f"| {row['concurrency']} | {row['steps']} | {row['late_pct']:.2f} % | "
            f"{row['max_slip_ms']:.1f} ms | {row['median_itl_ms']:.2f} ms | "
            f"{row['output_tokens_per_s']:.0f} | {row['failed']} |",
            flush=True,
        )
        if row["late_pct"] < 1.0 and not row["failed"]:
            capacity = concurrency
    print(f"\nlargest concurrency with < 1 % of steps late by > 1 ms: {capacity}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
