"""The capacity search against the simulator's dense-sweep truth (benchmarks.capacity_search).

Short outputs (32 tokens) keep the sweep to a few seconds; the levels are the product's
(a window of max(200, 4 × concurrency) requests), so this checks the search, not a timing.
"""

from __future__ import annotations

import pytest

from benchmarks.capacity_search import (
    FIXED_LEVELS,
    TARGET_ERROR_PCT,
    TARGET_PROBES,
    Config,
    Truth,
    evaluate,
    measure_level,
    summary,
)

# Judged by TTFT (a 16k batch budget queues prefills), and by p95 TPOT on another GPU.
TTFT_BOUND = Config(
    "h100-16k-short",
    "llama-3.1-8b",
    "H100",
    {"max_num_batched_tokens": 16384},
    1024,
    32,
    "ttft<500ms, tpot<50ms",
)
TPOT_P95_BOUND = Config(
    "l40s-p95-short", "mistral-7b", "L40S", {}, 512, 32, "ttft:p95<500ms, tpot:p95<40ms"
)


@pytest.mark.parametrize("config", [TTFT_BOUND, TPOT_P95_BOUND], ids=lambda c: c.name)
def test_it_finds_capacity_within_ten_percent_with_six_probes(config):
    row = evaluate(config)

    truth, found = row["truth"], row["search"]
    # The sweep went past the edge: a fail streak beyond the capacity it reports.
    assert truth["capacity"] is not None and truth["first_fail"] is not None
    assert truth["swept"] > truth["capacity"]
    # The edge lies between the fixed levels, so the search had to probe for it.
    assert truth["capacity"] not in FIXED_LEVELS
    assert found["probes"] >= 1
    assert abs(row["error_pct"]) <= TARGET_ERROR_PCT
    assert found["probes"] <= TARGET_PROBES
    assert row["target_met"] is True
    # What the search reports as capacity passed; the level above its bracket failed.
    assert found["capacity"] <= truth["capacity"]
    assert summary([row])["target_met"] is True


def test_it_judges_a_level_by_its_steady_window():
    result = measure_level(TPOT_P95_BOUND, 16)

    assert result["concurrency"] == 16
    assert result["failed"] == 0
    # The window holds requests_per_level (200) requests that started and ended inside it.
    assert result["completed"] >= 200
    assert set(result["slo"]) == {"ttft_ms", "tpot_ms"}
    assert result["slo"]["tpot_ms"]["percentile"] == 95
    # The level held the GPU for its ramp, window and drain: longer than the window.
    assert result["gpu_seconds"] > result["duration"] > 0


def test_it_counts_a_pass_beyond_the_sweep_towards_the_truth():
    def level(concurrency, tpot_ms):
        return {
            "concurrency": concurrency,
            "completed": 10,
            "failed": 0,
            "slo": {"tpot_ms": {"target": 50, "value": tpot_ms, "percentile": 99, "met": None}},
            "gpu_seconds": 1.0,
        }

    swept = {1: level(1, 10), 2: level(2, 40), 3: level(3, 60), 4: level(4, 70)}
    truth = Truth.of(swept, [level(9, 45)])

    assert truth.capacity == 9
    assert truth.edge == 2
    assert truth.first_fail == 3
    assert truth.passes_above_first_fail == [9]
    assert truth.swept == 4
    assert truth.margins == [0.2, 0.8, 1.2, 1.4]
