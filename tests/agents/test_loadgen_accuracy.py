"""Reported timings against what a ground-truth server really did, at 1 to 192 in flight.

The server (``fake_openai_server``) runs in its own process and records, per response id,
when each request had fully arrived and when each content chunk was written, on the same
monotonic clock as the client. So every error below is measured, not assumed.

Tolerances: the server stamps a request when its last byte arrived and a chunk just before
writing it, so the client cannot start a request after the server has it nor see a chunk
before its stamp: reported TTFT and E2EL may exceed the truth but never undercut it. The
upper bounds are for a 2-core machine shared with other test runs: client and server then
wait for a core, which shows as latency. The precise figures (client pinned to one core,
server to the other) come from ``benchmarks/loadgen_overhead.py``; these bounds only catch
a client that is broken (e.g. the send delayed behind other requests' work, or timestamps
taken after parsing a burst).
"""

from __future__ import annotations

import itertools
import statistics

import pytest

from agents.loadgen import (
    BenchConfig,
    LevelFinished,
    RandomPrompts,
    event_loop_runner,
    run_bench,
)
from tests.agents.fake_openai_server import FakeServer

TTFT_MS, ITL_MS, OUTPUT_LEN = 50, 10, 16
# Both clocks are CLOCK_MONOTONIC; this only absorbs float rounding.
CAUSALITY_SLACK_MS = 0.001
# (concurrency, requests, median TTFT error bound ms, median TPOT error bound ms)
LEVELS = [(1, 8, 5, 0.5), (8, 32, 8, 0.5), (64, 128, 25, 1.0), (192, 192, 60, 2.0)]


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def run_level(server: FakeServer, **overrides):
    """Runs one level; returns its result, its records and the server's truth."""
    server.reset()
    settings = {
        "base_url": server.base_url,
        "model": f"fake?ttft_ms={TTFT_MS}&itl_ms={ITL_MS}",
        "source": RandomPrompts(24, OUTPUT_LEN),
        "levels": ({"concurrency": 1},),
        "metrics_url": None,
    } | overrides

    async def go():
        async for event in run_bench(BenchConfig(**settings)):
            if isinstance(event, LevelFinished):
                return event.as_json(), event.records
        raise AssertionError("no level finished")

    with event_loop_runner() as runner:
        result, records = runner.run(go())
    return result, records, server.truth()


def ms(seconds: float) -> float:
    return seconds * 1000


def timing_errors(server: FakeServer, concurrency: int, requests: int) -> dict[str, float]:
    """Runs one level, checks what must hold on any machine (counts, causality, the report's
    own statistics) and returns the timing errors, which a machine busy enough to starve the
    client can inflate: median TTFT error, |median TPOT error|, |pooled ITL mean error| (ms)."""
    result, records, truth = run_level(
        server, levels=({"concurrency": concurrency},), num_prompts=requests
    )
    assert (result["completed"], result["failed"]) == (requests, 0)
    assert result["total_output_tokens"] == requests * OUTPUT_LEN
    assert result["total_input_tokens"] == sum(t["prompt_tokens"] for t in truth.values())
    assert result["max_concurrent_requests"] == concurrency
    ttft_errors, tpot_errors, e2el_errors, client_gaps, true_gaps = [], [], [], [], []
    for record in records:
        done = truth[record.response_id]
        writes = done["writes"]
        assert len(writes) == record.output_tokens == OUTPUT_LEN
        ttft_errors.append(ms(record.ttft - (writes[0] - done["t_recv"])))
        e2el_errors.append(ms(record.latency - (writes[-1] - done["t_recv"])))
        tpot_errors.append(ms(record.tpot - (writes[-1] - writes[0]) / (OUTPUT_LEN - 1)))
        client_gaps.extend(record.itl)
        true_gaps.extend(b - a for a, b in itertools.pairwise(writes))
    assert min(ttft_errors) > -CAUSALITY_SLACK_MS
    assert min(e2el_errors) > -CAUSALITY_SLACK_MS
    # Pooled ITL: the same number of gaps on both sides.
    assert len(client_gaps) == len(true_gaps)
    # The report's own statistics are those of the records.
    assert result["median_ttft_ms"] == pytest.approx(statistics.median(ms(r.ttft) for r in records))
    return {
        "ttft": statistics.median(ttft_errors),
        "tpot": abs(statistics.median(tpot_errors)),
        "itl_mean": abs(ms(statistics.fmean(client_gaps) - statistics.fmean(true_gaps))),
    }


@pytest.mark.parametrize(("concurrency", "requests", "ttft_bound", "tpot_bound"), LEVELS)
def test_reported_timings_match_the_server(server, concurrency, requests, ttft_bound, tpot_bound):
    """A broken client (a send delayed behind other requests' work, chunks stamped after a
    burst is parsed) misses the bounds on every attempt; a client that other test workers
    starved of a core misses them on one attempt only (seen on CI: 5 workers on 2 cores put
    a 3.6 ms ITL error on one run of 64 clients). So the bounds must hold on one of three
    attempts, like timeit's best of n, and everything else on every attempt."""
    bounds = {"ttft": ttft_bound, "tpot": tpot_bound, "itl_mean": tpot_bound}
    attempts = []
    for _ in range(3):
        errors = timing_errors(server, concurrency, requests)
        attempts.append(errors)
        if all(errors[name] < bound for name, bound in bounds.items()):
            return
    pytest.fail(f"timing errors (ms) over the bounds {bounds} on three attempts: {attempts}")


def open_loop_lag_ms(server: FakeServer) -> float:
    """Runs one open-loop level, checks its counts and schedule (on any machine) and returns
    the median lateness of the requests' sends against that schedule (ms)."""
    result, records, _ = run_level(
        server,
        model="fake?ttft_ms=5&itl_ms=1",
        source=RandomPrompts(8, 4),
        levels=({"request_rate": 150.0},),
        burstiness=0.5,
        num_prompts=150,
        seed=3,
    )
    assert result["completed"] == 150
    assert result["request_rate"] == 150.0 and result["burstiness"] == 0.5
    scheduled = [record.scheduled for record in records]
    assert scheduled == sorted(scheduled) and scheduled[0] == 0.0
    # 150 gaps at 150 req/s: about 1 s of schedule (checked statistically in test_arrivals).
    assert 0.5 < scheduled[-1] < 2.0
    origin = records[0].start
    return statistics.median(ms(record.start - origin - record.scheduled) for record in records)


def test_open_loop_requests_leave_on_schedule(server):
    """asyncio timers wake up to ~1 ms late (uvloop's resolution): a median lateness under
    3 ms on one of three attempts, as the timing bounds above (a client starved of a core by
    other test workers was 4.7 ms late on one CI run; a sender that waits on other work is
    late on every attempt)."""
    lags = []
    for _ in range(3):
        lags.append(open_loop_lag_ms(server))
        if lags[-1] < 3:
            return
    pytest.fail(f"median send lateness (ms) over 3 on three attempts: {lags}")


def test_chat_streams_are_timed_the_same_way(server):
    result, records, truth = run_level(
        server, endpoint="chat", levels=({"concurrency": 4},), num_prompts=8
    )
    assert (result["completed"], result["total_output_tokens"]) == (8, 8 * OUTPUT_LEN)
    for record in records:
        assert record.response_id.startswith("chatcmpl-")
        done = truth[record.response_id]
        assert ms(record.ttft - (done["writes"][0] - done["t_recv"])) > -CAUSALITY_SLACK_MS


def test_the_server_metrics_agree_with_the_client(server):
    result, _, _ = run_level(
        server,
        levels=({"concurrency": 4},),
        num_prompts=12,
        metrics_url="auto",
    )
    scraped = result["server"]
    assert scraped["generation_tokens"] == result["total_output_tokens"]
    assert scraped["prompt_tokens"] == result["total_input_tokens"]
    assert scraped["prefix_cache_hit_rate"] == pytest.approx(0.5, abs=0.01)
    assert scraped["num_gpu_blocks"] == 1024
    assert scraped["scrape_errors"] == 0
