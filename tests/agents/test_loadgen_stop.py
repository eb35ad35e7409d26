"""Stopping a benchmark early (the agent's deadline and cancel): a partial level, then nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from agents.loadgen import (
    BenchConfig,
    BenchFinished,
    LevelFinished,
    LevelStarted,
    RandomPrompts,
    RequestDone,
    event_loop_runner,
    run_bench,
)
from tests.agents.fake_openai_server import FakeServer

# 20 tokens 20 ms apart: each request lasts about half a second.
MODEL = "fake?ttft_ms=20&itl_ms=20"


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def collect(config: BenchConfig, *, stop_after_requests: int | None, stop_before: bool = False):
    """Runs ``config``, setting ``stop`` once that many requests of the first level ended;
    returns the events and the monotonic time the stop was set."""
    events: list = []
    stopped_at: list[float] = []

    async def go():
        stop = asyncio.Event()
        if stop_before:
            stop.set()
            stopped_at.append(time.monotonic())
        async for event in run_bench(config, stop=stop):
            events.append(event)
            if (
                isinstance(event, RequestDone)
                and stop_after_requests is not None
                and event.completed == stop_after_requests
                and not stop.is_set()
            ):
                stop.set()
                stopped_at.append(time.monotonic())

    with event_loop_runner() as runner:
        runner.run(go())
    return events, (stopped_at[0] if stopped_at else None)


def config(server: FakeServer, **overrides) -> BenchConfig:
    settings = {
        "base_url": server.base_url,
        "model": MODEL,
        "source": RandomPrompts(16, 20),
        "levels": ({"concurrency": 4}, {"concurrency": 8}),
        "num_prompts": 40,
        "metrics_url": None,
    } | overrides
    return BenchConfig(**settings)


@pytest.mark.slow
def test_a_stop_mid_level_reports_the_finished_requests_and_starts_no_other_level(server):
    server.reset()
    events, stopped_at = collect(config(server), stop_after_requests=6)
    levels = [event for event in events if isinstance(event, LevelFinished)]
    assert len(levels) == 1, "no level may start after the stop"
    result = levels[0].as_json()
    assert result["partial"] is True
    # 4 in flight when the 6th finished: those are cut off, none counted as failed.
    assert 6 <= result["completed"] < 40 and result["failed"] == 0
    assert result["aborted"] >= 1
    assert result["completed"] + result["aborted"] <= 40
    assert all(record.success for record in levels[0].records)
    finished = [event for event in events if isinstance(event, BenchFinished)]
    assert finished and finished[0].stopped and len(finished[0].levels) == 1
    # Nothing was sent after the stop: every request the server saw arrived before it (plus
    # the time one already-written request needs to arrive).
    truth = server.truth()
    assert len(truth) <= result["completed"] + result["aborted"]
    assert max(done["t_recv"] for done in truth.values()) < stopped_at + 0.05


def test_a_stop_before_a_level_starts_reports_nothing(server):
    server.reset()
    events, _ = collect(config(server), stop_after_requests=None, stop_before=True)
    assert not [event for event in events if isinstance(event, LevelStarted | LevelFinished)]
    finished = [event for event in events if isinstance(event, BenchFinished)]
    assert finished[0].stopped and finished[0].levels == []
    assert server.truth() == {}


@pytest.mark.slow
def test_a_stop_in_an_open_loop_level_abandons_the_scheduled_requests(server):
    server.reset()
    events, _ = collect(
        config(server, levels=({"request_rate": 20},), num_prompts=200), stop_after_requests=3
    )
    result = next(event for event in events if isinstance(event, LevelFinished)).result
    assert result.partial is True and 3 <= result.completed < 200
    assert len(server.truth()) < 200


def test_request_done_carries_its_record(server):
    server.reset()
    events, _ = collect(
        config(server, levels=({"concurrency": 2},), num_prompts=4), stop_after_requests=None
    )
    done = [event for event in events if isinstance(event, RequestDone)]
    assert len(done) == 4
    assert all(event.record.success and event.record.ttft is not None for event in done)
    level = next(event for event in events if isinstance(event, LevelFinished))
    assert "partial" not in level.result
