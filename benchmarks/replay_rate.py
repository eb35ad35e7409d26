"""How exactly the load generator replays a trace at 500 requests/s on one core.

Run from the repository root (Linux; pins the client to CPU 0 and the server to CPU 1):

    .venv/bin/python -m benchmarks.replay_rate [--rate 500] [--seconds 10] [--quick]

The trace is Mooncake-shaped and built here with a fixed seed (nothing is downloaded):
Poisson arrivals whose rate swings ±50 % in 2-second waves, prompts of 256–4,096 tokens
(log-uniform) whose first blocks of 512 share hash ids (one of 8 system prompts, then one
of 64 conversation histories), outputs of 16–128 tokens (uniform). It is written as a
Mooncake JSONL file and read back through ``agents.workloads`` as any upload is, then
replayed once, open loop, at ``--rate`` (its own mean rate scaled) against the ground-truth
server (``tests/agents/fake_openai_server.py``: TTFT 50 ms, 10 ms between tokens), which
records when each request arrived and each chunk left on the client's clock.

It prints the level's send lateness (actual send minus scheduled, p50/p99/max in ms; the
target is p99 ≤ 1 ms), ΔTTFT (reported minus the server's true TTFT, p50/p99 in ms), the
client's CPU per output token (from the level's start to its last answer) and the requests
that failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.loadgen import BenchConfig
from agents.loadgen.stats import percentile
from agents.loadgen.workload import trace_prompts
from benchmarks.loadgen_overhead import pin_client_and_server, timed_level, true_ttft_error_ms
from tests.agents.fake_openai_server import FakeServer

BLOCK = 512


def mooncake_lines(rate: float, seconds: float, seed: int = 19) -> list[str]:
    """A Mooncake-shaped trace (see the module docstring) of about ``rate × seconds``
    requests, as JSONL lines."""
    rng = random.Random(seed)
    lines, now, next_id = [], 0.0, 10_000
    while now < seconds:
        # Poisson arrivals whose rate swings in 2-second waves, as real traffic bursts.
        wave = 1 + 0.5 * math.sin(2 * math.pi * now / 2)
        now += rng.expovariate(rate * wave)
        input_len = int(math.exp(rng.uniform(math.log(256), math.log(4096))))
        system = rng.randrange(8)
        history = rng.randrange(64)
        blocks = math.ceil(input_len / BLOCK)
        ids = [system, 100 + history][: blocks - 1]
        ids += list(range(next_id, next_id + blocks - len(ids)))
        next_id += blocks
        item = {
            "timestamp": round(now * 1000, 3),
            "input_length": input_len,
            "output_length": rng.randint(16, 128),
            "hash_ids": ids,
        }
        lines.append(json.dumps(item))
    return lines


def replay(server: FakeServer, path: Path, rate: float) -> dict:
    """Replays the trace at ``path`` once at ``rate``; the figures printed for it."""
    server.reset()
    config = BenchConfig(
        base_url=server.base_url,
        model="fake?ttft_ms=50&itl_ms=10",
        source=trace_prompts(path, "mooncake", block_size=BLOCK),
        levels=({"request_rate": rate},),
        metrics_url=None,
    )
    result, records, cpu = timed_level(config)
    truth = server.truth()
    errors = sorted(
        true_ttft_error_ms(record, truth[record.response_id])
        for record in records
        if record.success
    )
    lateness = result["send_lateness"]
    return {
        "requests": len(records),
        "failed": result["failed"],
        "trace_rate": result["replay"]["trace_rate"],
        "lateness": (lateness["p50_ms"], lateness["p99_ms"], lateness["max_ms"]),
        "ttft": (percentile(errors, 50), percentile(errors, 99)),
        "cpu_us_per_token": (cpu["end"] - cpu["start"]) / result["total_output_tokens"] * 1e6,
        "duration": result["duration"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=500.0, help="requests/s replayed")
    parser.add_argument("--seconds", type=float, default=10.0, help="trace length at --rate")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a 4-second trace")
    args = parser.parse_args()
    seconds = 4.0 if args.quick else args.seconds
    server_cpu = pin_client_and_server()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as folder, FakeServer(cpu=server_cpu) as server:
        path = Path(folder) / "mooncake.jsonl"
        path.write_text("\n".join(mooncake_lines(args.rate, seconds)) + "\n")
        # One unmeasured replay at a tenth of the rate: imports, connections, warm-up.
        replay(server, path, args.rate / 10)
        print(
            f"{'rate':>6}{'reqs':>7}{'trace r/s':>10}{'late p50':>10}{'late p99':>10}"
            f"{'late max':>10}{'ΔTTFT p50':>11}{'ΔTTFT p99':>11}{'CPU µs/tok':>12}{'failed':>8}"
        )
        for _ in range(args.repeats):
            row = replay(server, path, args.rate)
            p50, p99, worst = row["lateness"]
            print(
                f"{args.rate:>6g}{row['requests']:>7}{row['trace_rate']:>10.1f}"
                f"{p50:>10.3f}{p99:>10.3f}{worst:>10.3f}"
                f"{row['ttft'][0]:>+11.3f}{row['ttft'][1]:>+11.3f}"
                f"{row['cpu_us_per_token']:>12.2f}{row['failed']:>8}",
                flush=True,
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
