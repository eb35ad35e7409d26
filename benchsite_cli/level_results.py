"""A measurement's result as the site's API answers it (the protocol's ``LevelResult``,
dumped to JSON): the one place the CLI names the figures it reads of a load level.

Guarantee: every name here is a ``LevelResult`` field. The CLI shares no code with the
agent's package (its import contract), so ``tests/cli/test_gate_metric_names.py`` holds each
name to the protocol; ``level_figure`` refuses any other name, so a reader elsewhere in the
CLI cannot ask for a figure no result carries; ``level_interval`` reads a figure's 95 %
confidence interval (``ci95``) under the same rule, and answers None for a result stored
before intervals were sent, or a figure that has none (ITL).
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
SLO_ATTAINMENT = "slo_attainment_pct"
# {figure: {"low", "high"}}: the 95 % confidence intervals of a level's headline figures.
CI95 = "ci95"
# What a run's summary shows of each level.
SUMMARY_FIGURES = ("p99_ttft_ms", "p99_itl_ms", OUTPUT_THROUGHPUT)

FIGURES = frozenset((*LATENCY_FIGURES, *RATE_FIGURES, DURATION, SLO_ATTAINMENT))


def level_figure(result: Mapping[str, Any], name: str) -> Any:
    """The figure ``name`` of a level's result as the API sent it (None when absent)."""
    if name not in FIGURES:
        raise KeyError(f"{name!r} is not a figure of a level's result")
    return result.get(name)


def level_interval(result: Mapping[str, Any], name: str) -> tuple[Any, Any] | None:
    """The 95 % interval of the figure ``name`` as ``(low, high)`` as the API sent them, or
    None when the result carries none for it."""
    if name not in FIGURES:
        raise KeyError(f"{name!r} is not a figure of a level's result")
    intervals = result.get(CI95)
    interval = intervals.get(name) if isinstance(intervals, Mapping) else None
    if not isinstance(interval, Mapping):
        return None
    return interval.get("low"), interval.get("high")
