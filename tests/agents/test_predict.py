"""Predict before renting (issue 18): the simulator offline, in simulated time, runs the same
benchmark as ``bench`` against the simulator's server, with the same level keys, labelled
simulated; ``benchsite-agent predict`` is its command line."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from agents import protocol
from agents.cli import main
from agents.engines.sim.engine import sim_engine
from agents.engines.sim.frontend import DEFAULT_FRONT_END
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen import BenchConfig, PrefixPrompts, RandomPrompts, event_loop_runner, run_levels
from agents.predict import OfflineBench, predict_trial
from agents.protocol import CapacitySearch, parse_slos
from tests.agents.test_hf_configs import LLAMA_3_1_8B, QWEN2_5_7B

LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"].facts
H100 = gpu_profile("H100")


def validated(level: dict) -> protocol.LevelResult:
    """A level as the protocol reads it (the server report travels in a message of its own)."""
    return protocol.LevelResult.model_validate({k: v for k, v in level.items() if k != "server"})


def offline(config: BenchConfig, flags: dict | None = None):
    return OfflineBench(config, make_scheduler(LLAMA_8B, H100, flags or {})).run()


# Half speed: each step lasts twice its simulated time, so that what the live path adds
# (the client's turn-around, a busy machine's stalls) is small beside it; at speed 1 with
# five test workers on two cores, live throughput once read 24 % under the offline one.
LIVE_SPEED = 0.5


def live_on_the_simulator(config: BenchConfig, workdir) -> list[dict]:
    """``config``'s levels measured by the load generator against serve-sim (Llama 3.1 8B
    on an H100, a context of 4,096, served as ``m``) at ``LIVE_SPEED``: its figures are in
    wall time (``in_simulated_time`` reads one as the offline run gives it)."""
    engine = sim_engine(
        model_spec="llama-3.1-8b",
        gpu="H100",
        config={"max_model_len": 4096},
        workdir=workdir,
        served_model_name="m",
        speed=LIVE_SPEED,
        startup_speed=1000.0,
        startup_timeout=60,
    )
    engine.start()
    try:
        with event_loop_runner() as runner:
            return [
                level.as_json()
                for level in runner.run(
                    run_levels(dataclasses.replace(config, base_url=engine.base_url))
                )
            ]
    finally:
        engine.stop()


def in_simulated_time(live: dict, key: str) -> float:
    """A figure of ``live_on_the_simulator`` (wall time at ``LIVE_SPEED``) in simulated
    time: latencies (``…_ms``) shorter, rates higher."""
    value = live[key]
    return value * LIVE_SPEED if key.endswith("_ms") else value / LIVE_SPEED


def closed_loop_config(**fields) -> BenchConfig:
    """A small closed-loop benchmark: 48 requests of 128 tokens in, 64 out, at 8 users."""
    defaults = {
        "base_url": "simulator://offline",
        "model": "m",
        "source": RandomPrompts(input_len=128, output_len=64),
        "levels": ({"concurrency": 8},),
        "num_prompts": 48,
        "metrics_url": None,
    }
    return BenchConfig(**(defaults | fields))


@pytest.mark.slow
def test_offline_levels_match_the_simulators_server_over_http(tmp_path):
    """The same closed-loop level measured by the load generator against serve-sim and
    predicted offline: the same keys, and the same figures within 15 %."""
    live_config = closed_loop_config(metrics_url="auto")
    (live,) = live_on_the_simulator(live_config, tmp_path)
    (predicted,) = offline(closed_loop_config(), {"max_model_len": 4096}).levels
    assert set(predicted) == set(live)
    assert set(predicted["server"]) == set(live["server"])
    validated(predicted)
    assert predicted["completed"] == live["completed"] == 48
    assert predicted["total_output_tokens"] == live["total_output_tokens"] == 48 * 64
    # The mean ITL, not the median: a busy machine delays the live server's tokens and then
    # sends them back to back, which halves the median gap while the sum of gaps (the
    # mean) is what the steps took (seen on a clean-clone CI run on 5 workers).
    for key in ("median_tpot_ms", "mean_itl_ms", "output_throughput"):
        assert predicted[key] == pytest.approx(in_simulated_time(live, key), rel=0.15), key
    assert predicted["server"]["num_gpu_blocks"] == live["server"]["num_gpu_blocks"]


def test_steady_levels_and_a_capacity_search_run_as_the_load_generator_runs_them():
    config = closed_loop_config(
        levels=({"concurrency": 4}, {"request_rate": 20.0}),
        steady_multiple=4.0,
        slos=parse_slos("ttft:p95<250ms, tpot:p95<9ms"),
        capacity=CapacitySearch(max_probes=5),
    )
    result = offline(config)
    fixed, rate, *probes = result.levels
    assert fixed["window"]["requests"] >= 48 and fixed["whole_level"]["completed"] > 48
    assert rate["request_rate"] == 20.0 and rate["burstiness"] == 1.0
    assert rate["window"]["requests"] >= 48
    assert probes and all(level["probe"] for level in probes)
    capacity = protocol.CapacityResult.model_validate(result.capacity)
    assert capacity.capacity is not None and capacity.bracket_high is not None
    # The capacity is the highest load that met the SLOs; the first failing load did not.
    by_load = {level["concurrency"]: level for level in [*probes, fixed] if "concurrency" in level}
    assert by_load[int(capacity.capacity)]["slo"]["tpot_ms"]["met"]
    assert not all(check["met"] for check in by_load[int(capacity.bracket_high)]["slo"].values())
    for level in result.levels:
        validated(level)


def test_it_is_deterministic():
    config = closed_loop_config(levels=({"concurrency": 16}, {"request_rate": 30.0}))
    assert offline(config).levels == offline(config).levels


def test_prefix_caching_hits_the_shared_prefix_and_cuts_ttft():
    config = closed_loop_config(source=PrefixPrompts(2048, 64, 32), num_prompts=32)
    cached = offline(config).levels[0]
    uncached = offline(config, {"enable_prefix_caching": False}).levels[0]
    # Every request after the first wave of 8 reuses the 2048-token prefix (of 2112 tokens),
    # and some of the first wave too: prompts admitted a step after the first one was cached.
    hit_rate = cached["server"]["prefix_cache_hit_rate"]
    assert (32 - 8) * 2048 / (32 * 2112) < hit_rate < 2048 / 2112
    assert uncached["server"]["prefix_cache_hit_rate"] is None
    assert cached["median_ttft_ms"] < 0.6 * uncached["median_ttft_ms"]


def test_a_prompt_beyond_the_context_is_refused_as_vllm_refuses_it():
    config = closed_loop_config(source=RandomPrompts(input_len=900, output_len=200))
    (level,) = offline(config, {"max_model_len": 1024}).levels
    assert level["completed"] == 0 and level["failed"] == 48
    assert set(level["errors"]) == {"http_400"}


def test_a_configuration_vllm_would_refuse_is_predicted_refused():
    seventy = MODEL_PRESETS["llama-3.1-70b"].facts
    prediction = predict_trial(seventy, H100, {}, closed_loop_config())
    assert not prediction.starts and "CUDA out of memory" in prediction.refusal
    assert prediction.levels == [] and prediction.gpu_seconds == 0
    started = predict_trial(seventy, H100, {"tensor_parallel_size": 4}, closed_loop_config())
    assert started.starts and started.kv_cache_tokens > 0
    assert started.cold_start_seconds > 20 and started.level_seconds > 0


# -- the command line ----------------------------------------------------------------------


def test_predict_takes_a_hugging_face_config_json_as_published(tmp_path, capsys):
    """A dense model's config.json without a parameter count: the count comes from its
    architecture (``serve-sim`` used to refuse it)."""
    config_json = tmp_path / "config.json"
    config_json.write_text(json.dumps(QWEN2_5_7B))
    serve = tmp_path / "serve.json"
    serve.write_text(json.dumps({"max_num_seqs": 32, "max_model_len": 8192}))
    out = tmp_path / "out.json"
    code = main(
        [
            "predict", "--model-spec", str(config_json), "--gpu", "H100",
            "--config", str(serve), "--concurrency", "1,16", "--input-len", "256",
            "--output-len", "64", "--num-prompts", "40", "--json", str(out),
        ]
    )  # fmt: skip  # flag, value
    assert code == 0
    assert "SIMULATED" in capsys.readouterr().out
    document = json.loads(out.read_text())
    assert document["simulated"] is True
    assert document["prediction"]["flags"] == {"max_num_seqs": 32, "max_model_len": 8192}
    assert document["prediction"]["kv_cache_tokens"] > 0
    assert document["config"]["base_url"] == "simulator://offline"
    one, sixteen = document["levels"]
    for level in document["levels"]:
        validated(level)
        assert level["completed"] == 40 and level["failed"] == 0
    assert sixteen["output_throughput"] > 8 * one["output_throughput"]


def test_predict_with_slos_writes_the_capacity(tmp_path):
    config_json = tmp_path / "config.json"
    config_json.write_text(json.dumps(LLAMA_3_1_8B))
    out = tmp_path / "out.json"
    code = main(
        [
            "predict", "--model-spec", str(config_json), "--gpu", "H100",
            "--tensor-parallel-size", "2", "--concurrency", "8", "--num-prompts", "40",
            "--slo", "tpot:p95<8ms", "--capacity-search", "concurrency", "--json", str(out),
        ]
    )  # fmt: skip  # flag, value
    assert code == 0
    document = json.loads(out.read_text())
    assert document["prediction"]["flags"] == {"tensor_parallel_size": 2}
    capacity = document["capacity"]
    assert capacity["capacity"] is not None
    assert statistics.fmean(level["completed"] for level in document["levels"]) >= 40


def test_predict_says_vllm_would_refuse_and_exits_3(tmp_path, capsys):
    out = tmp_path / "out.json"
    code = main(
        ["predict", "--model-spec", "llama-3.1-70b", "--gpu", "H100", "--concurrency", "1",
         "--json", str(out)]
    )  # fmt: skip  # flag, value
    assert code == 3
    assert "vLLM would refuse to start" in capsys.readouterr().err
    document = json.loads(out.read_text())
    assert document["levels"] == [] and "CUDA out of memory" in document["prediction"]["refusal"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--gpu", "H1000", "--concurrency", "1"], "--gpu"),
        (["--gpu", "H100"], "give at least one load level"),
        (["--gpu", "H100", "--concurrency", "1", "--tensor-parallel-size", "3"], "3"),
        (["--gpu", "H100", "--concurrency", "0"], "--concurrency"),
        (["--gpu", "H100", "--concurrency", "1", "--slo", "ttft<fast"], "--slo"),
    ],
)
def test_bad_arguments_are_named_and_exit_with_code_2(arguments, message, capsys):
    code = main(["predict", "--model-spec", "llama-3.1-8b", *arguments])
    assert code == 2
    err = capsys.readouterr().err
    assert "error:" in err and message in err and "Traceback" not in err


def test_a_bad_serve_config_is_named(tmp_path, capsys):
    serve = tmp_path / "serve.json"
    serve.write_text(json.dumps({"max_num_seqs": "many"}))
    code = main(
        ["predict", "--model-spec", "llama-3.1-8b", "--gpu", "H100", "--config", str(serve),
         "--concurrency", "1"]
    )  # fmt: skip  # flag, value
    assert code == 2
    err = capsys.readouterr().err
    assert "--config" in err and "max_num_seqs" in err
    spec = tmp_path / "model.json"
    spec.write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    code = main(["predict", "--model-spec", str(spec), "--gpu", "H100", "--concurrency", "1"])
    assert code == 2
    assert "--model-spec" in capsys.readouterr().err


def test_a_chat_endpoint_pays_the_api_servers_chat_cost():
    # 200 requests at 200/s, as the load generator sends them: the chat endpoint's serial
    # cost in the one API-server process (CHAT_REQUEST_S each) cannot keep up; the
    # completions endpoint's (none by default) can.
    def level(endpoint):
        config = closed_loop_config(
            levels=({"request_rate": 200.0},), num_prompts=200, endpoint=endpoint
        )
        return offline(config, {"max_model_len": 4096}).levels[0]

    chat, completions = level("chat"), level("completions")
    cost = DEFAULT_FRONT_END.chat_request_s
    assert cost * 200 > 1  # more than a second's work a second
    # Capped by the one process (the level's duration also holds the last steps).
    assert 0.7 / cost < chat["request_throughput"] <= 1 / cost
    assert completions["request_throughput"] > 1.2 * chat["request_throughput"]
    assert chat["median_ttft_ms"] > 2 * completions["median_ttft_ms"]
