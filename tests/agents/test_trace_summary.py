"""A trace's summary (issue 19): what the site stores at upload and previews — counts, length
statistics and histograms, arrivals over time and the share of input tokens in blocks an
earlier request already sent; plain JSON for any trace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.workloads.summary import (
    HISTOGRAM_BINS,
    MAX_ARRIVAL_BUCKETS,
    MIN_BUCKET_SECONDS,
    summarize_trace,
)
from agents.workloads.traces import Trace, TraceRequest, parse_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"


def trace(*requests: TraceRequest, block_size: int = 4, fmt: str = "mooncake") -> Trace:
    return Trace(fmt, tuple(requests), block_size)


def test_it_counts_and_describes_the_lengths():
    summary = summarize_trace(
        Trace(
            "burstgpt",
            (
                TraceRequest(0.0, 10, 1),
                TraceRequest(1.0, 20, 3),
                TraceRequest(2.0, 30, 5),
                TraceRequest(4.0, 40, 7),
            ),
            skipped=3,
        )
    )
    assert (summary["requests"], summary["skipped"], summary["span_seconds"]) == (4, 3, 4.0)
    assert summary["mean_rate"] == 3 / 4  # (requests - 1) over the span
    assert (summary["input_tokens"], summary["output_tokens"]) == (100, 16)
    lengths = summary["input_len"]
    assert (lengths["min"], lengths["mean"], lengths["max"]) == (10, 25.0, 40)
    assert lengths["p50"] == 25.0  # half way between 20 and 30
    assert math.isclose(lengths["p99"], 30 + 0.97 * 10)
    assert summary["longest_request_tokens"] == 47
    assert summary["shared_prefix_share"] == 0.0  # no hash ids: nothing known to be shared


def test_the_histogram_has_fixed_bins_from_the_shortest_to_the_longest():
    summary = summarize_trace(trace(*(TraceRequest(0.0, n, 1) for n in (0 + 100, 150, 199, 200))))
    histogram = summary["input_len"]["histogram"]
    assert len(histogram["counts"]) == HISTOGRAM_BINS == len(histogram["edges"]) - 1
    assert (histogram["edges"][0], histogram["edges"][-1]) == (100, 200)
    # Bins of 5 tokens: 100 in the first, 150 starts the 11th, 199 and 200 share the last.
    assert histogram["counts"][0] == 1 and histogram["counts"][10] == 1
    assert histogram["counts"][-1] == 2 and sum(histogram["counts"]) == 4


def test_equal_lengths_fill_the_first_bin_of_a_one_token_range():
    summary = summarize_trace(trace(TraceRequest(0.0, 7, 9), TraceRequest(0.0, 7, 9)))
    histogram = summary["output_len"]["histogram"]
    assert histogram["edges"][0] == 9 and histogram["edges"][-1] == 10
    assert histogram["counts"] == [2] + [0] * (HISTOGRAM_BINS - 1)
    # All at once: a trace with no span has no finite rate, and one bucket of arrivals.
    assert summary["mean_rate"] is None
    assert summary["arrivals"] == {"bucket_seconds": 1.0, "counts": [2]}


def test_arrivals_are_counted_in_round_buckets_of_at_most_the_limit():
    requests = [TraceRequest(float(second), 1, 1) for second in range(0, 600)]
    arrivals = summarize_trace(trace(*requests))["arrivals"]
    # 600 s in 1-2-5 steps: 5 s buckets are the smallest that need no more than 120.
    assert arrivals["bucket_seconds"] == 5.0
    assert len(arrivals["counts"]) == 120 and set(arrivals["counts"]) == {5}


@pytest.mark.parametrize("gap", [5e-324, 1e-300, 4e-7])
def test_requests_closer_than_a_microsecond_share_its_one_bucket(gap):
    # 5e-324 over 120 buckets is 0: no logarithm, no power of ten to start from.
    summary = summarize_trace(trace(TraceRequest(0.0, 1, 1), TraceRequest(gap, 1, 1)))
    assert summary["arrivals"] == {"bucket_seconds": MIN_BUCKET_SECONDS, "counts": [2]}
    assert summary["span_seconds"] == gap


def test_the_shared_share_counts_blocks_an_earlier_request_listed():
    summary = summarize_trace(
        trace(
            TraceRequest(0.0, 8, 1, (1, 2)),  # two blocks of 4, both new
            TraceRequest(1.0, 10, 1, (1, 2, 3)),  # 8 tokens seen before, 2 new
            TraceRequest(2.0, 6, 1, (1, 3)),  # block 3 was the earlier one's last: 2 tokens
        )
    )
    # Shared: 4 + 4 of the second; 4 of the third's first block and 2 of its last.
    assert summary["shared_prefix_share"] == (8 + 4 + 2) / (8 + 10 + 6)


def test_an_id_repeated_within_one_request_is_not_shared():
    summary = summarize_trace(trace(TraceRequest(0.0, 8, 1, (5, 5))))
    assert summary["shared_prefix_share"] == 0.0


def test_the_shipped_mooncake_example_shares_its_system_prompt():
    parsed = parse_trace((EXAMPLES / "mooncake.jsonl").read_bytes(), "mooncake")
    summary = summarize_trace(parsed)
    # Worked out from the file here: blocks 0-2 (512 tokens each) open every request.
    seen: set[int] = set()
    shared = 0
    for request in parsed.requests:
        for index, block in enumerate(request.hash_ids):
            if block in seen:
                shared += min(512, request.input_len - 512 * index)
        seen |= set(request.hash_ids)
    assert shared >= 23 * 3 * 512
    assert summary["shared_prefix_share"] == shared / sum(r.input_len for r in parsed.requests)
    assert summary["requests"] == 24 and summary["block_size"] == 512


lengths = st.integers(min_value=1, max_value=1_000_000)
offsets = st.floats(min_value=0, max_value=400 * 86_400, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(offsets, lengths, lengths, st.lists(st.integers(0, 5), max_size=3)),
        min_size=1,
        max_size=40,
    )
)
def test_any_trace_sums_up_and_stays_plain_json(rows):
    rows = sorted(rows)
    origin = rows[0][0]
    requests = tuple(
        TraceRequest(offset - origin, max(a, 4 * len(ids)), b, tuple(ids))
        for offset, a, b, ids in rows
    )
    summary = summarize_trace(trace(*requests))
    assert json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert sum(summary["input_len"]["histogram"]["counts"]) == len(requests)
    assert sum(summary["arrivals"]["counts"]) == len(requests)
    assert len(summary["arrivals"]["counts"]) <= MAX_ARRIVAL_BUCKETS
    assert 0 <= summary["shared_prefix_share"] <= 1
    low, high = summary["input_len"]["min"], summary["input_len"]["max"]
    assert low <= summary["input_len"]["p50"] <= summary["input_len"]["p99"] <= high
