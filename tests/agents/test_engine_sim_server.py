"""The simulator as a server: started through the engine lifecycle, load-tested with the
load generator of issue 3, scraped like vLLM, and labelled simulated."""

from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from agents.engines.base import EngineFailed, FailureKind
from agents.engines.process import Watchdog
from agents.engines.sim.engine import sim_engine
from agents.loadgen import (
    BenchConfig,
    PrefixPrompts,
    RandomPrompts,
    event_loop_runner,
    run_levels,
)

# Every test serves the simulator from a process of its own.
pytestmark = pytest.mark.slow

SPEED = 4.0
# Slower than real time, so that a step (about 23 ms of wall time) is long beside a busy
# machine's stalls (at 2x, 6 ms steps once read 31 % long in CI with five test workers).
CLIENT_TIMING_SPEED = 0.5


@pytest.fixture(scope="module")
def small_batch_sim(tmp_path_factory):
    """Llama 3.1 8B on an H100 at most 4 sequences at a time, time running 4x faster."""
    engine = sim_engine(
        model_spec="llama-3.1-8b",
        gpu="H100",
        config={"max_num_seqs": 4, "max_model_len": 4096},
        workdir=tmp_path_factory.mktemp("sim"),
        served_model_name="sim-8b",
        speed=1000.0,  # start-up phases pass in milliseconds…
        startup_timeout=30,
    )
    report = engine.start()
    yield engine, report
    engine.stop()


def get(url: str) -> tuple[dict, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return dict(response.headers), response.read()


def test_it_starts_with_vllm_worded_phases_and_says_it_is_simulated(small_batch_sim):
    engine, report = small_batch_sim
    assert report.simulated
    assert [p.name for p in report.phases] == [
        "process_start",
        "weights_loaded",
        "kv_cache_sized",
        "graphs_captured",
        "engine_initialized",
        "server_listening",
        "health_ready",
        "first_token",
    ]
    assert report.phase("weights_loaded").detail["weights_gib"] == pytest.approx(14.96, abs=0.01)
    headers, body = get(engine.base_url + "/v1/models")
    assert headers["X-Benchsite-Simulated"] == "1"
    assert json.loads(body)["data"][0]["owned_by"] == "benchsite-simulator"
    _, metrics = get(engine.base_url + "/metrics")
    assert b"benchsite:simulated{" in metrics
    assert b'num_gpu_blocks="' in metrics


def test_the_load_generator_sees_queueing_kv_use_and_scaled_timing(tmp_path):
    engine = sim_engine(
        model_spec="llama-3.1-8b",
        gpu="H100",
        config={"max_num_seqs": 4, "max_model_len": 4096},
        workdir=tmp_path,
        served_model_name="sim-8b",
        speed=SPEED,
        startup_speed=1000.0,
        startup_timeout=60,
    )
    engine.start()
    try:
        config = BenchConfig(
            base_url=engine.base_url,
            model="sim-8b",
            source=RandomPrompts(input_len=256, output_len=32),
            levels=({"concurrency": 16},),
            num_prompts=48,
            metrics_period=0.05,
        )
        with event_loop_runner() as runner:
            (level,) = [level.as_json() for level in runner.run(run_levels(config))]
    finally:
        engine.stop()
    assert level["completed"] == 48 and level["failed"] == 0
    assert level["total_output_tokens"] == 48 * 32
    server = level["server"]
    assert server["num_requests_running"]["max"] <= 4
    assert server["num_requests_waiting"]["max"] > 0
    assert server["kv_cache_usage_perc"]["max"] > 0
    assert server["generation_tokens"] == 48 * 32
    assert server["num_gpu_blocks"] > 0


def test_client_timing_is_simulated_time_divided_by_speed(tmp_path):
    engine = sim_engine(
        model_spec="llama-3.1-8b",
        gpu="H100",
        config={"max_model_len": 4096, "enforce_eager": True},
        workdir=tmp_path,
        served_model_name="sim-8b",
        speed=CLIENT_TIMING_SPEED,
        startup_speed=1000.0,
        startup_timeout=60,
    )
    engine.start()
    try:
        config = BenchConfig(
            base_url=engine.base_url,
            model="sim-8b",
            source=RandomPrompts(input_len=128, output_len=64),
            levels=({"concurrency": 4},),
            num_prompts=16,  # four waves: the median request is not one wave's
        )
        with event_loop_runner() as runner:
            (level,) = [level.as_json() for level in runner.run(run_levels(config))]
    finally:
        engine.stop()
    # The server's histograms hold simulated seconds; the client sees them SPEED x faster.
    # Steps are uniform here (same lengths, whole waves), so each request's TPOT is the step.
    # Per request, not per gap: on a busy machine the client reads tokens in bursts (short
    # gaps, then a long one) while each request's decode time stays the server's; the median
    # request, since a stall of one process can still lengthen one request.
    simulated_itl = level["server"]["server_mean_itl_ms"]
    assert level["median_tpot_ms"] * CLIENT_TIMING_SPEED == pytest.approx(simulated_itl, rel=0.15)


@pytest.mark.parametrize(
    ("config", "gpu", "kind"),
    [
        ({"max_model_len": 131072}, "RTX 4090", FailureKind.KV_CACHE_TOO_SMALL),
        ({"max_model_len": 4096}, "L40S", FailureKind.OOM_AT_STARTUP),  # 70B on 48 GB
        (
            {"max_model_len": 4096, "pipeline_parallel_size": 2},
            "H100",
            FailureKind.UNSUPPORTED_FLAG,
        ),
    ],
)
def test_it_refuses_to_start_where_vllm_would(tmp_path, config, gpu, kind):
    spec = "llama-3.1-70b" if gpu == "L40S" else "llama-3.1-8b"
    engine = sim_engine(model_spec=spec, gpu=gpu, config=config, workdir=tmp_path, speed=1000.0)
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    assert caught.value.kind is kind
    assert caught.value.exit_code == 1
    assert caught.value.evidence


def test_the_watchdog_heals_a_killed_simulator(small_batch_sim):
    engine, _ = small_batch_sim
    with Watchdog(engine, restarts=1, period=0.05) as dog:
        os.kill(engine.pid, signal.SIGKILL)
        assert dog.healed.wait(30)
    (incident,) = dog.incidents
    assert incident.restarted and incident.failure.signal == signal.SIGKILL
    headers, _ = get(engine.base_url + "/health")
    assert headers["X-Benchsite-Simulated"] == "1"


def test_the_same_seed_gives_the_same_text(tmp_path):
    texts = []
    for run in range(2):
        engine = sim_engine(
            model_spec="llama-3.1-8b",
            gpu="H100",
            config={"max_model_len": 4096},
            workdir=tmp_path / str(run),
            served_model_name="m",
            speed=1000.0,
            seed=7,
        )
        engine.start()
        try:
            request = urllib.request.Request(
                engine.base_url + "/v1/completions",
                data=json.dumps({"model": "m", "prompt": "a b c", "max_tokens": 12}).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                texts.append(json.loads(response.read())["choices"][0]["text"])
        finally:
            engine.stop()
    assert texts[0] == texts[1] and len(texts[0].split()) == 12


def test_chat_streams_and_prefix_caching_are_seen_by_the_load_generator(small_batch_sim):
    engine, _ = small_batch_sim
    config = BenchConfig(
        base_url=engine.base_url,
        model="sim-8b",
        endpoint="chat",
        source=PrefixPrompts(512, 32, 8, 1),
        levels=({"concurrency": 4},),
        num_prompts=12,
    )
    with event_loop_runner() as runner:
        (level,) = [level.as_json() for level in runner.run(run_levels(config))]
    assert level["completed"] == 12 and level["failed"] == 0
    assert level["total_output_tokens"] == 12 * 8
    assert level["usage_missing"] == 0
    # Every prompt after the first shares its 512-word prefix: most of it is a cache hit.
    assert level["server"]["prefix_cache_hit_rate"] > 0.5
