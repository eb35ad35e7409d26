"""Level results from fixed per-request data, against values worked out by hand."""

from __future__ import annotations

import pytest

from agents.loadgen.records import RequestRecord
from agents.loadgen.results import level_result
from agents.protocol import Slos


def record(index, start, *, ttft=None, itl=(), out=None, prompt=None, requested=None, end=None):
    latency = None if ttft is None else ttft + sum(itl)
    result = RequestRecord(index, requested or out or 1, expected_prompt_len=7, start=start)
    result.ttft, result.latency, result.itl = ttft, latency, list(itl)
    result.chunks = 0 if ttft is None else 1 + len(itl)
    result.output_tokens, result.prompt_tokens = out, prompt
    result.finished = end
    if ttft is None:
        result.fail("http_500", "boom")
    else:
        result.success = True
    return result


RECORDS = [
    record(0, 0.0, ttft=0.1, itl=[0.02, 0.03], out=3, prompt=10, end=0.16),
    record(1, 0.5, ttft=0.2, itl=[0.05], out=2, prompt=20, end=0.8),
    record(2, 0.6, end=0.7),
    # Asked for 4 tokens, served 5; the server sent no prompt count (our estimate is 7).
    record(3, 1.0, ttft=0.3, itl=[0.1, 0.1, 0.1], out=5, requested=4, end=1.65),
]


def result(slos=None, records=RECORDS):
    return level_result({"concurrency": 2}, records, duration=2.0, slos=slos)


def test_counts_tokens_and_throughput():
    level = result()
    assert level["concurrency"] == 2
    assert (level["completed"], level["failed"]) == (3, 1)
    assert (level["total_input_tokens"], level["total_output_tokens"]) == (37, 10)
    assert level["request_throughput"] == 1.5
    assert level["output_throughput"] == 5.0
    assert level["total_token_throughput"] == 23.5
    assert level["request_goodput"] is None  # no SLO, no goodput


def test_latency_statistics_follow_vllm_semantics():
    level = result()
    # TTFT 100, 200, 300 ms.
    assert level["mean_ttft_ms"] == pytest.approx(200)
    assert level["p99_ttft_ms"] == pytest.approx(298)  # 200 + 0.98 × 100
    # TPOT per request: (e2el − ttft)/(tokens − 1) = 25, 50, 75 ms (r3 uses the served 5).
    assert level["mean_tpot_ms"] == pytest.approx(50)
    assert level["p90_tpot_ms"] == pytest.approx(70)
    # ITL pooled over requests: 20, 30, 50, 100, 100, 100 ms (chunk-weighted).
    assert level["mean_itl_ms"] == pytest.approx(400 / 6)
    assert level["median_itl_ms"] == pytest.approx(75)
    # E2EL to the last content chunk: 150, 250, 600 ms.
    assert level["mean_e2el_ms"] == pytest.approx(1000 / 3)
    assert level["median_e2el_ms"] == pytest.approx(250)


def test_peaks_errors_and_the_output_length_flag():
    level = result()
    # Chunks at 0.10/0.12/0.15 and 0.70/0.75 s fall in second 0, the four of r3 in second 1.
    assert level["max_output_tokens_per_s"] == 5
    assert level["max_concurrent_requests"] == 2  # r1 and r2 overlap
    assert level["errors"] == {"http_500": {"count": 1, "sample": "boom"}}
    assert level["output_len_mismatch"] == {
        "requests": 1,
        "requested_tokens": 4,
        "served_tokens": 5,
        "sample": "request 3 asked for 4 tokens and was served 5",
    }
    assert level["usage_missing"] == 0


def test_goodput_counts_requests_meeting_every_slo():
    level = result(Slos(ttft_ms=250, tpot_ms=60))
    assert level["request_goodput"] == 1.0  # r0 and r1; r3's TTFT is 300 ms
    # One of three over each target where a p99 allows 1 in 100: missed, confidently.
    common = {"judged": 3, "beyond": 1, "verdict": "missed", "confidence_pct": 95.0}
    common["spans"] = []  # too few requests for spans: the counts alone decide
    assert level["slo"] == {
        "ttft_ms": {
            "target": 250,
            "p99": pytest.approx(298),
            "percentile": 99,
            "value": pytest.approx(298),
            "met": False,
            **common,
        },
        "tpot_ms": {
            "target": 60,
            "p99": pytest.approx(74.5),
            "percentile": 99,
            "value": pytest.approx(74.5),
            "met": False,
            **common,
        },
    }
    assert result(Slos(e2el_ms=200))["request_goodput"] == 0.5  # r0 only
    assert result(Slos(itl_ms=60))["request_goodput"] == 1.0  # r3's p99 gap is 100 ms


def test_the_keys_are_vllms_plus_ours():
    stats = {
        f"{stat}_{metric}_ms"
        for stat in ("mean", "median", "std", "p90", "p95", "p99")
        for metric in ("ttft", "tpot", "itl", "e2el")
    }
    expected = {
        "concurrency",
        "duration",
        "completed",
        "failed",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "request_goodput",
        "output_throughput",
        "total_token_throughput",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "errors",
        "output_len_mismatch",
        "usage_missing",
        "slo",
        "slo_attainment_pct",
        "server",
    }
    assert set(result()) == expected | stats


def test_a_level_where_everything_failed_reports_no_latencies():
    level = result(records=[record(0, 0.0, end=0.1), record(1, 0.0, end=0.2)])
    assert (level["completed"], level["failed"]) == (0, 2)
    assert level["mean_ttft_ms"] is None and level["p99_e2el_ms"] is None
    assert level["max_output_tokens_per_s"] == 0
    assert level["errors"]["http_500"]["count"] == 2


def test_each_objective_is_judged_at_the_percentile_it_names():
    # TTFT 100, 200, 300 ms: the median (200) is under 250 ms where the p99 (298) is not, but
    # three requests, one of them beyond, cannot show a median met: too close to call.
    level = result(Slos(ttft_ms=250, ttft_percentile=50))
    assert level["slo"]["ttft_ms"] == {
        "target": 250,
        "p99": pytest.approx(298),
        "percentile": 50,
        "value": pytest.approx(200),
        "met": False,
        "judged": 3,
        "beyond": 1,
        "spans": [],
        "verdict": "too_close",
        "confidence_pct": 95.0,
    }
    assert result(Slos(ttft_ms=350, ttft_percentile=50))["slo"]["ttft_ms"]["verdict"] == (
        "too_close"  # none of three beyond: still fewer than a p50 needs (5)
    )
    assert result(Slos(ttft_ms=250, ttft_percentile=90))["slo"]["ttft_ms"]["met"] is False


def test_attainment_is_the_share_of_all_requests_meeting_every_target():
    # r0 and r1 meet 250 ms; r2 failed and r3 took 300 ms: 2 of 4 requests, 50 %.
    level = result(Slos(ttft_ms=250, ttft_percentile=50, min_attainment_pct=50))
    assert level["slo_attainment_pct"] == 50.0
    assert level["slo"]["attainment"] == {
        "target": 50,
        "value": 50.0,
        "met": False,
        "judged": 4,
        "beyond": 2,
        "spans": [],
        "verdict": "too_close",
        "confidence_pct": 95.0,
    }
    missed = result(Slos(ttft_ms=250, ttft_percentile=50, min_attainment_pct=75))
    assert missed["slo"]["attainment"]["met"] is False


def test_throughput_may_count_other_requests_than_the_latencies():
    level = level_result(
        {"concurrency": 2}, RECORDS[:2], duration=2.0, throughput_records=RECORDS[1:]
    )
    assert level["completed"] == 2  # the latency set
    assert level["request_throughput"] == 1.0  # r1 and r3 succeeded among RECORDS[1:]
    assert level["output_throughput"] == 3.5  # 2 + 5 tokens over 2 s
