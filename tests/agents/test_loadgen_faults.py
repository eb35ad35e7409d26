"""Faults are counted by kind with a sample message, never a crash; events stream in order."""

from __future__ import annotations

import socket

import pytest

from agents.loadgen import (
    BenchConfig,
    BenchFinished,
    LevelFinished,
    LevelStarted,
    RandomPrompts,
    RequestDone,
    ServerUnreachable,
    config_from_workload,
    event_loop_runner,
    run_bench,
    run_levels,
)
from agents.protocol import Slos, Workload
from tests.agents.fake_openai_server import FakeServer


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def config(server, query: str = "", **overrides) -> BenchConfig:
    settings = {
        "base_url": server.base_url,
        "model": f"fake?ttft_ms=5&itl_ms=1&{query}",
        "source": RandomPrompts(8, 6),
        "levels": ({"concurrency": 3},),
        "num_prompts": 6,
        "metrics_url": None,
    } | overrides
    return BenchConfig(**settings)


def run(bench_config: BenchConfig) -> list[dict]:
    with event_loop_runner() as runner:
        return [level.as_json() for level in runner.run(run_levels(bench_config))]


@pytest.mark.parametrize(
    ("query", "overrides", "kind", "sample"),
    [
        ("mode=http500", {}, "http_500", "fake internal error"),
        ("mode=drop&drop_after=3", {}, "stream_ended_early", "connection closed mid-body"),
        ("mode=malformed", {}, "malformed_sse", "not a JSON object"),
        ("mode=stream_error", {}, "stream_error", "fake stream error"),
        ("ttft_ms=3000", {"request_timeout": 0.2}, "timeout", "no complete response"),
    ],
)
def test_each_failure_is_counted_by_kind(server, query, overrides, kind, sample):
    (level,) = run(config(server, query, **overrides))
    assert (level["completed"], level["failed"]) == (0, 6)
    assert list(level["errors"]) == [kind]
    assert level["errors"][kind]["count"] == 6
    assert sample in level["errors"][kind]["sample"]


def test_a_level_after_failures_runs_normally_on_the_same_client(server):
    levels = run(config(server, "mode=drop&drop_after=2", levels=({"concurrency": 3},)))
    assert levels[0]["failed"] == 6
    healthy = run(config(server))
    assert (healthy[0]["completed"], healthy[0]["errors"]) == (6, {})


def test_a_server_that_ignores_the_requested_length_is_flagged(server):
    (level,) = run(config(server, "serve_len=4"))
    assert level["completed"] == 6
    assert level["output_len_mismatch"]["requests"] == 6
    assert level["output_len_mismatch"]["requested_tokens"] == 36
    assert level["output_len_mismatch"]["served_tokens"] == 24
    (honest,) = run(config(server))
    assert honest["output_len_mismatch"] is None


def test_a_missing_usage_chunk_is_reported_and_chunks_are_counted_instead(server):
    (level,) = run(config(server, "mode=no_usage"))
    assert (level["completed"], level["usage_missing"]) == (6, 6)
    assert level["total_output_tokens"] == 36
    assert level["mean_tpot_ms"] is None  # TPOT needs the server's token count


def test_an_unreachable_server_fails_before_the_first_level():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    unreachable = BenchConfig(
        base_url=f"http://127.0.0.1:{port}",
        model="m",
        source=RandomPrompts(8, 8),
        levels=({"concurrency": 1},),
    )
    with pytest.raises(ServerUnreachable, match="cannot reach"):
        run(unreachable)


@pytest.mark.parametrize(
    ("second", "named"),
    [({"concurrency": 2}, "concurrency 2"), ({"request_rate": 5}, "rate 5 req/s")],
)
def test_it_raises_server_unreachable_before_a_level_once_the_server_is_gone(second, named):
    # The server dies as the first level's clock starts: that level counts its failures, and
    # the next one, whose connections cannot be opened, is never measured.
    events = []

    async def collect(gone: FakeServer):
        bench = config(gone, levels=({"concurrency": 1}, second), num_prompts=3)
        async for event in run_bench(bench):
            events.append(event)
            if isinstance(event, LevelStarted):
                gone.process.kill()
                gone.process.wait()

    with (
        FakeServer() as gone,
        event_loop_runner() as runner,
        pytest.raises(ServerUnreachable, match=f"before {named}: .*refused"),
    ):
        runner.run(collect(gone))
    (first,) = [event for event in events if isinstance(event, LevelFinished)]
    assert first.as_json()["failed"] >= 2
    assert [event.index for event in events if isinstance(event, LevelStarted)] == [0]


def test_progress_events_arrive_in_order(server):
    async def collect():
        return [
            event
            async for event in run_bench(
                config(
                    server,
                    levels=(
                        {"concurrency": 2},
                        {"request_rate": "inf"},
                    ),
                )
            )
        ]

    with event_loop_runner() as runner:
        events = runner.run(collect())
    kinds = [type(event).__name__ for event in events]
    one_level = ["LevelStarted"] + ["RequestDone"] * 6 + ["LevelFinished"]
    assert kinds == one_level * 2 + ["BenchFinished"]
    dones = [event for event in events if isinstance(event, RequestDone)]
    assert [event.completed for event in dones[:6]] == [1, 2, 3, 4, 5, 6]
    assert isinstance(events[0], LevelStarted) and events[0].total == 6
    finished = events[-1]
    assert isinstance(finished, BenchFinished)
    assert [level.request_rate for level in finished.levels] == [None, "inf"]
    assert finished.config["levels"] == [{"concurrency": 2}, {"request_rate": "inf"}]


def test_closing_the_event_stream_early_cancels_the_run(server):
    async def first_request_only():
        stream = run_bench(config(server, "ttft_ms=50", num_prompts=50))
        async for event in stream:
            if isinstance(event, RequestDone):
                break
        await stream.aclose()
        return event

    with event_loop_runner() as runner:
        event = runner.run(first_request_only())
    assert event.completed + event.failed == 1


def test_duration_mode_stops_sending_when_time_is_up(server):
    (level,) = run(config(server, "ttft_ms=20&itl_ms=5", duration=0.5, num_prompts=10_000))
    # Three slots, each request about 45 ms: roughly 33 in 0.5 s. A request started just
    # before the end still finishes, so the level lasts at most one request longer.
    assert 10 < level["completed"] < 60
    assert level["failed"] == 0
    assert 0.5 <= level["duration"] < 0.5 + 0.5


def test_warmup_requests_are_sent_but_not_measured(server):
    server.reset()
    (level,) = run(config(server, warmup=4))
    assert level["completed"] == 6
    assert len(server.truth()) == 10


def test_a_workload_from_the_site_runs_as_configured(server):
    workload = Workload.model_validate(
        {
            "dataset": {"kind": "prefix", "shared_len": 16, "suffix_len": 4, "output_len": 3},
            "endpoint": "chat",
            "concurrency": [2],
            "request_rates": ["inf"],
            "requests_per_level": 4,
            # Four requests cannot judge even a p50: no measuring again (test_slo_verdicts).
            "max_extensions": 0,
        }
    )
    bench_config = config_from_workload(
        workload,
        base_url=server.base_url,
        model="fake?ttft_ms=2&itl_ms=1",
        slos=Slos(ttft_ms=1000, ttft_percentile=50),  # a window of 5 can judge a p50
        metrics_url=None,
    )
    levels = run(bench_config)
    assert [(level.get("concurrency"), level.get("request_rate")) for level in levels] == [
        (2, None),
        (None, "inf"),
    ]
    closed, burst = levels
    # The closed-loop level is steady: its window holds max(4, 4 x 2) requests; an "inf"
    # burst has no steady state and is measured whole.
    assert closed["completed"] == 8 and closed["window"]["requests"] == 8
    assert closed["whole_level"]["completed"] > 8
    assert burst["completed"] == 4 and "window" not in burst
    assert all(level["request_goodput"] > 0 for level in levels)
    assert all(level["total_input_tokens"] == level["completed"] * 20 for level in levels)


@pytest.mark.parametrize(
    "levels",
    [(), ({"concurrency": 0},), ({"request_rate": 0},), ({"concurrency": 1, "request_rate": 1},)],
)
def test_a_config_with_a_bad_level_is_refused(levels):
    with pytest.raises(ValueError, match="level"):
        BenchConfig(base_url="http://x", model="m", source=RandomPrompts(1, 1), levels=levels)
