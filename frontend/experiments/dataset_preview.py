"""A trace dataset's preview: its stored summary (``agents.workloads.summary``) as the facts,
tables and chart data its page shows.

Guarantee: ``trace_preview`` turns any stored summary into a preview or None — a ShareGPT
dataset's ``{}``, or a summary missing a figure or of another shape, gives None (the page
says there is nothing to preview) and never an exception, so no dataset's page is a 500.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agents.protocol import MOONCAKE_BLOCK_SIZE


@dataclass(frozen=True)
class Histogram:
    """One length distribution: its statistics, and its bins as (token range, requests)."""

    key: str  # "input_len" or "output_len"
    title: str
    stats: list[tuple[str, str]]
    bins: list[tuple[str, int]]


@dataclass(frozen=True)
class TracePreview:
    facts: list[tuple[str, str]]
    histograms: list[Histogram]
    bucket_seconds: float
    # (bucket start in seconds, requests, requests per second), in time order.
    arrivals: list[tuple[str, int, str]]
    chart: dict  # what the page's script draws: the same figures as the tables


def _number(value: float) -> str:
    """1234.5 → '1,234.5'; whole numbers without decimals."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _bin_label(low: float, high: float, last: bool) -> str:
    """The whole token counts in ``[low, high)`` (``[low, high]`` for the last bin)."""
    first = math.ceil(low)
    final = math.floor(high) if last else math.ceil(high) - 1
    if first > final:
        return ""  # narrower than one token: holds no length
    return f"{first:,}" if first == final else f"{first:,}–{final:,}"


def _histogram(key: str, title: str, lengths: dict) -> Histogram:
    edges, counts = lengths["histogram"]["edges"], lengths["histogram"]["counts"]
    if len(edges) != len(counts) + 1:
        raise ValueError("a histogram has one more edge than bins")
    labels = [_bin_label(edges[i], edges[i + 1], i == len(counts) - 1) for i in range(len(counts))]
    stats = [(name, _number(lengths[name])) for name in ("min", "mean", "p50", "p99", "max")]
    return Histogram(
        key=key,
        title=title,
        stats=stats,
        bins=[(label, int(count)) for label, count in zip(labels, counts, strict=True) if label],
    )


def _facts(summary: dict) -> list[tuple[str, str]]:
    rate = summary["mean_rate"]
    share = summary["shared_prefix_share"]
    block = summary.get("block_size", MOONCAKE_BLOCK_SIZE)
    return [
        ("Requests", f"{summary['requests']:,}"),
        ("Rows left out", f"{summary['skipped']:,} (nothing to send or to generate)"),
        ("Span", f"{_number(summary['span_seconds'])} s"),
        (
            "Mean rate",
            "all at once"
            if rate is None
            else f"{rate:.3g} requests/s (a request-rate level of this replays it as recorded)",
        ),
        ("Input tokens", f"{summary['input_tokens']:,}"),
        ("Output tokens", f"{summary['output_tokens']:,}"),
        ("Longest request", f"{summary['longest_request_tokens']:,} tokens (prompt + output)"),
        (
            "Shared-prefix share",
            f"{share:.1%} of input tokens in blocks of {block} an earlier request sent",
        ),
    ]


def trace_preview(summary: object) -> TracePreview | None:
    """The preview of a stored trace summary, or None when there is none to show."""
    if not isinstance(summary, dict) or not summary:
        return None
    try:
        histograms = [
            _histogram("input_len", "Input (prompt) tokens", summary["input_len"]),
            _histogram("output_len", "Output tokens", summary["output_len"]),
        ]
        width = float(summary["arrivals"]["bucket_seconds"])
        counts = [int(count) for count in summary["arrivals"]["counts"]]
        arrivals = [
            (_number(index * width), count, f"{count / width:.3g}")
            for index, count in enumerate(counts)
        ]
        facts = _facts(summary)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError):
        return None
    chart = {
        "histograms": {
            h.key: {"labels": [b[0] for b in h.bins], "counts": [b[1] for b in h.bins]}
            for h in histograms
        },
        "arrivals": {
            "starts": [index * width for index in range(len(counts))],
            "rates": [count / width for count in counts],
            "bucket_seconds": width,
        },
    }
    return TracePreview(
        facts=facts,
        histograms=histograms,
        bucket_seconds=width,
        arrivals=arrivals,
        chart=chart,
    )
