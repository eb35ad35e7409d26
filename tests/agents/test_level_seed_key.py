"""A level's traffic is seeded by its key (its kind and load), not by the label people read:
rewording ``level_label`` changes no prompt and no send time, live or offline, and the key is
the string that seeded every level measured so far, so their traffic stays as it was."""

from __future__ import annotations

import asyncio
import random
import sys

import pytest

from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen import BenchConfig, RandomPrompts, driver, events
from agents.loadgen.levels import level_key, level_rngs
from agents.predict import OfflineBench

# The strings that seeded each kind of level before the key had a name of its own: a level's
# traffic is random.Random(f"{seed}:{key}:{repeat}") and its send times' the same + ":arrivals".
HISTORIC_KEYS = [
    ({"concurrency": 8}, "concurrency 8"),
    ({"request_rate": 2.5}, "rate 2.5 req/s"),
    ({"request_rate": 4.0}, "rate 4.0 req/s"),
    ({"request_rate": "inf"}, "rate inf req/s"),
]


def _reworded(level: dict) -> str:
    return "a level reworded for people: " + repr(sorted(level.items()))


@pytest.fixture
def reworded_labels(monkeypatch):
    """``level_label`` reworded in every agent module that holds it (a module that imported
    the name keeps its own reference)."""
    original = events.level_label
    for name, module in list(sys.modules.items()):
        if name.startswith("agents.") and getattr(module, "level_label", None) is original:
            monkeypatch.setattr(module, "level_label", _reworded)


@pytest.mark.parametrize(("level", "key"), HISTORIC_KEYS)
def test_it_seeds_a_level_as_it_always_did(level, key):
    assert level_key(level) == key
    prompts, arrivals = level_rngs(7, level_key(level), 2)
    assert prompts.getstate() == random.Random(f"7:{key}:2").getstate()
    assert arrivals.getstate() == random.Random(f"7:{key}:2:arrivals").getstate()


def _offline(config: BenchConfig) -> list[dict]:
    facts, h100 = MODEL_PRESETS["llama-3.1-8b"].facts, gpu_profile("H100")
    return OfflineBench(config, make_scheduler(facts, h100, {}), intervals=False).run().levels


def test_it_sends_the_same_traffic_offline_whatever_the_label_says(request):
    config = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=RandomPrompts(input_len=64, output_len=16),
        levels=({"concurrency": 4}, {"request_rate": 20.0}),
        num_prompts=12,
        repeats=2,
        metrics_url=None,
    )
    before = _offline(config)
    request.getfixturevalue("reworded_labels")
    assert events.level_label({"concurrency": 4}) != "concurrency 4"  # the rewording took
    after = _offline(config)
    # Simulated time is a pure function of the traffic: every figure, every repeat, the same.
    assert after == before
    assert before[0] != before[1]  # a repeat draws fresh prompts (the test can fail)


def test_it_seeds_a_live_level_by_its_key(reworded_labels, monkeypatch):
    seeded: list[tuple] = []

    class Seeded(Exception):
        pass

    def spy(seed, key, repeat):
        seeded.append((seed, key, repeat))
        raise Seeded

    monkeypatch.setattr(driver, "level_rngs", spy)
    config = BenchConfig(
        base_url="http://127.0.0.1:9",
        model="m",
        source=RandomPrompts(64, 16),
        levels=({"request_rate": 2.5},),
        seed=3,
    )
    runner = driver.LevelDriver(config, emit=lambda event: None)
    for _ in range(2):
        with pytest.raises(Seeded):
            asyncio.run(runner.run_level(0, {"request_rate": 2.5}))
    assert seeded == [(3, "rate 2.5 req/s", 0), (3, "rate 2.5 req/s", 1)]
