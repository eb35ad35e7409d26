"""A measurement's result as the site's API answers it (the protocol's ``LevelResult``,
dumped to JSON): the one place the CLI names the figures it reads of a load level.

Guarantee: every name here is a ``LevelResult`` field. The CLI shares no code with the
agent's package (its import contract), so ``tests/cli/test_gate_metric_names.py`` holds each
name to the protocol; ``level_figure`` refuses any other name, so a reader elsewhere in the
CLI cannot ask for a figure no result carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Every statistic of every latency metric, named as ``vllm bench serve`` names them.
LATENCY_FIGURES = tuple(
    f"{stat}_{metric}_ms"
    for metric in ("ttft", "tpot", "itl", "e2el")
    for stat in ("mean", "median", "std", "p90", "p95", "p99")
)
OUTPUT_THROUGHPUT = "output_throughput"
RATE_FIGURES = (
    "request_throughput",
    "request_goodput",
    OUTPUT_THROUGHPUT,
    "total_token_throughput",
    "max_output_tokens_per_s",
)
DURATION = "duration"
# What a run's summary shows of each level.
SUMMARY_FIGURES = ("p99_ttft_ms", "p99_itl_ms", OUTPUT_THROUGHPUT)

FIGURES = frozenset((*LATENCY_FIGURES, *RATE_FIGURES, DURATION))


def level_figure(result: Mapping[str, Any], name: str) -> Any:
    """The figure ``name`` of a level's result as the API sent it (None when absent)."""
    if name not in FIGURES:
        raise KeyError(f"{name!r} is not a figure of a level's result")
    return result.get(name)
