"""How many concurrent chat sessions one agent core drives, and how exactly.

Run from the repository root (Linux; pins the client to CPU 0 and the server to CPU 1):

    .venv/bin/python -m benchmarks.sessions_rate [--sessions 2000] [--turns 12000] [--quick]

A closed-loop level of ``--sessions`` concurrent multi-turn chat sessions (3–8 turns, a
shared system prompt of 200 tokens, messages of 50 and replies of 32 tokens, an exponential
think time of mean 1 s before each later turn) against the ground-truth server
(``tests/agents/fake_openai_server.py``: TTFT 50 ms, 10 ms between tokens), its
window holding ``--turns`` turns. Every turn sends the whole history, encoded as it is sent.

Sessions join over 2 s (a steady level: its window opens after every slot's first session),
and the figures cover every turn of the level: the turns per second and output tokens per
second the client sustained, its CPU per output token (from the level's start to its last
answer), ΔTTFT (reported minus the server's true TTFT, p50/p99 in ms), the turns that
failed, and the client's CPU busy share (CPU seconds over wall seconds: near 1.0, one core
is the limit).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.loadgen import BenchConfig, SessionPrompts
from agents.loadgen.stats import percentile
from benchmarks.loadgen_overhead import pin_client_and_server, timed_level, true_ttft_error_ms
from tests.agents.fake_openai_server import FakeServer


def measure(server: FakeServer, sessions: int, turns: int, think: float) -> dict:
    """One closed-loop level of ``sessions`` sessions and ``turns`` turns."""
    server.reset()
    config = BenchConfig(
        base_url=server.base_url,
        model="fake?ttft_ms=50&itl_ms=10",
        source=SessionPrompts(
            min_turns=3,
            max_turns=8,
            system_len=200,
            user_len=50,
            output_len=32,
            think_seconds=think,
        ),
        levels=({"concurrency": sessions},),
        endpoint="chat",
        num_prompts=turns,
        # Sessions join over 2 s, as users do, not in one burst of first turns; the level
        # is steady, its window of ``turns`` turns after every slot's first session.
        ramp_up_seconds=2.0,
        steady_multiple=1.0,
        metrics_url=None,
        request_timeout=300,
    )
    _, records, cpu = timed_level(config)
    truth = server.truth()
    errors = sorted(
        true_ttft_error_ms(record, truth[record.response_id])
        for record in records
        if record.success
    )
    wall = cpu["wall_end"] - cpu["wall_start"]
    # The whole level's tokens (a steady result's headline counts its window only).
    tokens = sum(record.served_output_tokens for record in records if record.success)
    return {
        "turns": len(records),
        "failed": sum(not record.success for record in records),
        "turns_per_s": len(records) / wall,
        "tokens_per_s": tokens / wall,
        "cpu_us_per_token": (cpu["end"] - cpu["start"]) / tokens * 1e6,
        "busy": (cpu["end"] - cpu["start"]) / wall,
        "ttft": (percentile(errors, 50), percentile(errors, 99)),
        "longest_turn": max(record.turn for record in records),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000, help="concurrent sessions")
    parser.add_argument("--turns", type=int, default=12000, help="turns sent in the level")
    parser.add_argument("--think", type=float, default=1.0, help="mean think time, s")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="200 sessions, 1,200 turns")
    args = parser.parse_args()
    sessions, turns = (200, 1200) if args.quick else (args.sessions, args.turns)
    server_cpu = pin_client_and_server()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with FakeServer(cpu=server_cpu) as server:
        measure(server, 20, 100, args.think)  # unmeasured: imports, first connections
        print(
            f"{'sessions':>9}{'turns':>7}{'turns/s':>9}{'tok/s':>9}{'CPU µs/tok':>12}"
            f"{'busy':>6}{'ΔTTFT p50':>11}{'ΔTTFT p99':>11}{'failed':>8}"
        )
        for _ in range(args.repeats):
            row = measure(server, sessions, turns, args.think)
            print(
                f"{sessions:>9}{row['turns']:>7}{row['turns_per_s']:>9.0f}"
                f"{row['tokens_per_s']:>9,.0f}{row['cpu_us_per_token']:>12.2f}"
                f"{row['busy']:>6.2f}{row['ttft'][0]:>+11.3f}{row['ttft'][1]:>+11.3f}"
                f"{row['failed']:>8}",
                flush=True,
            )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
