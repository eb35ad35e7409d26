"""The simulator beside published vLLM measurements (the table in docs/simulator.md).

    .venv/bin/python -m benchmarks.sim_calibration

Each row replays a published setup as a closed-loop level in simulated time (no server, no
wall clock: the output is the same on every machine) and prints the published figure, the
simulator's and the relative error. Sources are named in docs/simulator.md.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

from agents.engines.sim import SimRequest, closed_loop
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile


@dataclass(frozen=True)
class Row:
    source: str
    model: str
    gpu: str
    input_len: int
    output_len: int
    concurrency: int
    requests: int
    metric: str
    published: float


ROWS = (
    Row("musgrave-a100", "llama-3.1-8b", "A100 40GB", 1024, 128, 1, 20, "decode_tok_s", 75),
    Row("musgrave-a100", "llama-3.1-8b", "A100 40GB", 1024, 128, 8, 160, "gain_vs_c1", 6.6),
    Row("inferencebench-h100", "llama-3.1-8b", "H100", 128, 128, 1, 20, "tpot_ms", 6.48),
    Row("inferencebench-h100", "llama-3.1-8b", "H100", 128, 128, 16, 320, "tpot_ms", 10.94),
    Row("inferencebench-h100", "llama-3.1-8b", "H100", 128, 128, 16, 320, "output_tok_s", 1384.2),
    Row("rahman-4090", "mistral-7b", "RTX 4090", 256, 128, 4, 300, "output_tok_s", 210),
    Row("rahman-4090", "mistral-7b", "RTX 4090", 256, 128, 8, 300, "output_tok_s", 377),
    Row("rahman-4090", "mistral-7b", "RTX 4090", 256, 128, 16, 300, "output_tok_s", 644),
    Row("rahman-4090", "mistral-7b", "RTX 4090", 256, 128, 32, 300, "output_tok_s", 975),
    Row("rahman-4090", "mistral-7b", "RTX 4090", 256, 128, 4, 300, "median_ttft_ms", 53),
    Row("rahman-4090", "mistral-7b", "RTX 4090", 256, 128, 32, 300, "median_ttft_ms", 277),
)


def measure(model: str, gpu: str, input_len: int, output_len: int, c: int, n: int) -> dict:
    scheduler = make_scheduler(
        MODEL_PRESETS[model].facts, gpu_profile(gpu), {"max_model_len": 4096}
    )
    result = closed_loop(
        scheduler, concurrency=c, total=n, make=lambda i: SimRequest(i, input_len, output_len)
    )
    tpots = [
        (r.token_times[-1] - r.token_times[0]) / (len(r.token_times) - 1) for r in result.requests
    ]
    return {
        "output_tok_s": result.output_throughput,
        "tpot_ms": 1000 * statistics.median(tpots),
        "decode_tok_s": 1000 / (1000 * statistics.median(tpots)),
        "median_ttft_ms": 1000 * statistics.median(result.ttfts()),
    }


def simulated(row: Row) -> float:
    figures = measure(
        row.model, row.gpu, row.input_len, row.output_len, row.concurrency, row.requests
    )
    if row.metric == "gain_vs_c1":
        single = measure(row.model, row.gpu, row.input_len, row.output_len, 1, 20)
        return figures["output_tok_s"] / single["output_tok_s"]
    return figures[row.metric]


def main() -> int:
    print("| source | model | GPU | in/out | c | metric | published | simulator | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        value = simulated(row)
        error = (value - row.published) / row.published * 100
        shown = f"{value:,.0f}" if value >= 100 else f"{value:.2f}"
        print(
            f"| {row.source} | {row.model} | {row.gpu} | {row.input_len}/{row.output_len} | "
            f"{row.concurrency} | {row.metric} | {row.published:g} | {shown} | "
            f"{error:+.0f} % |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
