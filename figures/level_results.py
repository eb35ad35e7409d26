"""The names of a level result's figures: the fields of the protocol's ``LevelResult`` that
a reader compares, gates or shows, as ``vllm bench serve`` names them.

Guarantee: written here only. The agent's protocol declares its ``LevelResult`` figure
fields from these names (``agents.protocol.level_result``), and the CLI reads a result the
site's API sends by them (``benchsite_cli.level_results``), so the two cannot spell a figure
two ways.
"""

from __future__ import annotations

# The latency metrics, in the order vllm bench serve reports them, and their statistics.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
LATENCY_STATISTICS = ("mean", "median", "std", "p90", "p95", "p99")


def latency_field(statistic: str, metric: str) -> str:
    """``latency_field("p99", "ttft")`` is ``"p99_ttft_ms"``: the ``LevelResult`` field of one
    statistic of one latency metric; ValueError for a statistic or metric it has not."""
    if statistic not in LATENCY_STATISTICS or metric not in LATENCY_METRICS:
        raise ValueError(f"no latency figure {statistic}_{metric}_ms")
    return f"{statistic}_{metric}_ms"


def percentile_statistic(percentile: int) -> str:
    """The statistic that is a percentile: 50 is ``"median"``, 99 is ``"p99"``."""
    statistic = "median" if percentile == 50 else f"p{percentile}"
    if statistic not in LATENCY_STATISTICS:
        raise ValueError(f"no latency statistic for percentile {percentile}")
    return statistic


# Every statistic of every latency metric, metric by metric (the protocol's field order).
LATENCY_FIGURES = tuple(
    latency_field(statistic, metric)
    for metric in LATENCY_METRICS
    for statistic in LATENCY_STATISTICS
)
OUTPUT_THROUGHPUT = "output_throughput"
# Requests and tokens per second, in the protocol's field order.
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

# The figures of a level that may be compared and gated.
FIGURES = frozenset((*LATENCY_FIGURES, *RATE_FIGURES, DURATION, SLO_ATTAINMENT))
