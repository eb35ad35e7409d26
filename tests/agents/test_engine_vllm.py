"""The real-vLLM engine's lifecycle, against a stand-in ``vllm serve`` printing vLLM's lines.

The same code runs real vLLM in tests/vllm (``make test-vllm``); here every path is exercised
in a second or two: phases, failure classes, stop and port reuse, the watchdog.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from agents.engines.base import EngineFailed, FailureKind
from agents.engines.process import Watchdog, port_is_free
from agents.engines.vllm import vllm_engine, vllm_env
from agents.engines.vllm_log import LogPhases, classify_failure
from agents.protocol import ServeGridError

FAKE = [sys.executable, str(Path(__file__).with_name("fake_vllm_serve.py"))]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def engine_for(tmp_path: Path, model: Path, config: dict | None = None, **options):
    env = options.pop("env", {})
    return vllm_engine(
        model=str(model),
        config=config or {"max_model_len": 512},
        workdir=tmp_path / "trial",
        command=FAKE,
        served_model_name="tiny",
        env={"FAKE_VLLM_LINE_DELAY": "0.01", **env},
        startup_timeout=options.pop("startup_timeout", 30),
        stop_grace=options.pop("stop_grace", 5),
        **options,
    )


def test_it_records_the_phases_of_a_cpu_start_in_order(tmp_path, model_dir):
    engine = engine_for(tmp_path, model_dir)
    seen = []
    try:
        report = engine.start(on_phase=seen.append)
    finally:
        engine.stop()
    names = [phase.name for phase in report.phases]
    assert names == [
        "process_start",
        "weights_loaded",
        "kv_cache_sized",
        "engine_initialized",
        "server_listening",
        "health_ready",
        "first_token",
    ]
    assert [phase.name for phase in seen] == names  # reported as they happened
    assert report.unknown == ["graphs_captured"]  # not seen on CPU: unknown, not guessed
    assert report.phase("kv_cache_sized").detail["kv_cache_tokens"] == 65536
    assert report.phase("weights_loaded").detail == {"load_seconds": 0.02, "checkpoint_gib": 0.0}
    assert report.version == "0.32.0"
    times = [phase.at for phase in report.phases]
    assert times == sorted(times)
    assert report.phase("first_token").detail["probe_ttft_ms"] > 0
    assert not report.simulated
    log = engine.log_path.read_text()
    assert "KV cache size: 65,536 tokens" in log


def test_it_reads_gpu_wording_with_weight_size_and_graph_capture(tmp_path, model_dir):
    engine = engine_for(tmp_path, model_dir, env={"FAKE_VLLM_FLAVOUR": "gpu"})
    try:
        report = engine.start()
    finally:
        engine.stop()
    assert report.phase("weights_loaded").detail["weights_gib"] == 14.99
    assert report.phase("graphs_captured").detail["capture_seconds"] == 12
    assert report.unknown == []


def test_it_builds_an_argv_list_from_the_schema_and_a_controlled_env(tmp_path, model_dir):
    os.environ["BENCHSITE_SECRET_FOR_TEST"] = "x"
    try:
        engine = engine_for(
            tmp_path,
            model_dir,
            {"max_num_seqs": 8, "enable_prefix_caching": False, "max_model_len": 512},
            cpu=True,
        )
    finally:
        del os.environ["BENCHSITE_SECRET_FOR_TEST"]
    assert engine.argv[len(FAKE) :] == [
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(engine.port),
        "--served-model-name",
        "tiny",
        "--max-num-seqs",
        "8",
        "--max-model-len",
        "512",
        "--no-enable-prefix-caching",
    ]
    assert "BENCHSITE_SECRET_FOR_TEST" not in engine.env
    assert engine.env["VLLM_TARGET_DEVICE"] == "cpu"
    assert engine.env["VLLM_NO_USAGE_STATS"] == "1"
    assert engine.env["VLLM_CACHE_ROOT"].startswith(str(tmp_path))
    assert len(engine.env["VLLM_RPC_BASE_PATH"]) < 40  # room for socket names under 108 bytes


def test_it_refuses_a_config_the_schema_refuses_before_starting_anything(tmp_path, model_dir):
    with pytest.raises(ServeGridError) as caught:
        engine_for(tmp_path, model_dir, {"max_num_seqs": 0})
    assert caught.value.errors[0].field == "max_num_seqs"
    assert not (tmp_path / "trial").exists()


@pytest.mark.parametrize("vllm_version", [None, "0.13.0"])
def test_it_refuses_the_simulators_acceptance_rate_whatever_the_version(
    tmp_path, model_dir, vllm_version
):
    # Real vLLM measures the rate and refuses the key at start: named before anything runs,
    # also when no version was given (the simulator's check takes it then).
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    with pytest.raises(ServeGridError) as caught:
        engine_for(
            tmp_path,
            model_dir,
            {"speculative_config": {**spec, "acceptance_rate": 0.7}},
            vllm_version=vllm_version,
        )
    assert [error.field for error in caught.value.errors] == ["speculative_config.acceptance_rate"]
    assert "only the simulator" in caught.value.errors[0].message
    assert not (tmp_path / "trial").exists()
    engine_for(tmp_path, model_dir, {"speculative_config": spec}, vllm_version=vllm_version)


@pytest.mark.parametrize(
    ("config", "extra", "kind", "needle"),
    [
        ({"max_model_len": 100_000}, (), FailureKind.KV_CACHE_TOO_SMALL, "estimated maximum"),
        ({"gpu_memory_utilization": 0.05}, (), FailureKind.OOM_AT_STARTUP, "No available memory"),
        ({"max_model_len": 512}, ("--bogus-flag",), FailureKind.UNSUPPORTED_FLAG, "unrecognized"),
    ],
)
def test_it_classifies_a_start_up_failure_with_its_evidence(
    tmp_path, model_dir, config, extra, kind, needle
):
    engine = engine_for(tmp_path, model_dir, config, extra_args=extra)
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    failure = caught.value
    assert failure.kind is kind
    assert any(needle in line for line in failure.evidence)
    assert failure.exit_code in (1, 2)
    assert port_is_free("127.0.0.1", engine.port)


def test_it_says_model_not_found(tmp_path):
    engine = engine_for(tmp_path, tmp_path / "no-such-model")
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    assert caught.value.kind is FailureKind.MODEL_NOT_FOUND
    assert "Invalid repository ID" in caught.value.evidence[0]


def test_it_times_out_and_kills_the_whole_group(tmp_path, model_dir):
    engine = engine_for(tmp_path, model_dir, env={"FAKE_VLLM_STALL": "1"}, startup_timeout=1.5)
    started = time.monotonic()
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    assert caught.value.kind is FailureKind.STARTUP_TIMEOUT
    assert time.monotonic() - started < 10
    with pytest.raises(ProcessLookupError):
        os.killpg(engine.pid, 0)  # nothing of the group is left


def test_it_reports_a_command_that_cannot_run(tmp_path, model_dir):
    engine = vllm_engine(
        model=str(model_dir),
        config={},
        workdir=tmp_path,
        command=[str(tmp_path / "missing-vllm"), "serve"],
    )
    with pytest.raises(EngineFailed) as caught:
        engine.start()
    assert caught.value.kind is FailureKind.CRASH


def test_it_stops_with_sigterm_then_starts_the_next_config_on_the_same_port(tmp_path, model_dir):
    first = engine_for(tmp_path, model_dir, {"max_num_seqs": 4})
    first.start()
    first.stop()
    first.stop()  # idempotent
    second = engine_for(tmp_path, model_dir, {"max_num_seqs": 8}, port=first.port)
    try:
        report = second.start()
    finally:
        second.stop()
    assert report.base_url == first.base_url
    assert second.exit_status() is None  # stopped on purpose: not a failure


def test_it_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring', flush=True)\ntime.sleep(60)\n"
    )
    from agents.engines.process import ProcessEngine, free_port

    engine = ProcessEngine(
        name="stubborn",
        argv=[sys.executable, str(script)],
        env=vllm_env(tmp_path),
        host="127.0.0.1",
        port=free_port(),
        model="x",
        workdir=tmp_path,
        startup_timeout=0.5,
        stop_grace=0.5,
    )
    with pytest.raises(EngineFailed):
        engine.start()
    with pytest.raises(ProcessLookupError):
        os.killpg(engine.pid, 0)


def test_the_watchdog_restarts_a_killed_server_once_and_says_what_was_lost(tmp_path, model_dir):
    engine = engine_for(tmp_path, model_dir)
    engine.start()
    incidents = []
    try:
        with Watchdog(engine, restarts=1, period=0.05, on_incident=incidents.append) as dog:
            first_pid = engine.pid
            os.kill(first_pid, signal.SIGKILL)
            assert dog.healed.wait(20)
            assert engine.pid != first_pid
            assert engine.exit_status() is None
            # A second crash is not healed: the budget of one restart is spent.
            done = threading.Event()
            dog.on_incident = lambda incident: (incidents.append(incident), done.set())
            os.kill(engine.pid, signal.SIGKILL)
            assert done.wait(20)
    finally:
        engine.stop()
    healed, fatal = incidents
    assert healed.failure.kind is FailureKind.CRASH
    assert healed.failure.signal == signal.SIGKILL
    assert healed.restarted and healed.restart.phase("health_ready") is not None
    assert "in flight" in healed.lost
    assert not fatal.restarted and "engine is down" in fatal.lost


def test_log_patterns_tolerate_older_and_reworded_lines():
    parser = LogPhases()
    lines = [
        "INFO 05-24 14:27:36 [api_server.py:1043] vLLM API server version 0.8.5.post1",
        "INFO 05-24 [worker.py:267] Loading model weights took 14.9888 GB",
        "INFO 05-24 [executor_base.py:111] # cuda blocks: 7124, # CPU blocks: 2048",
        "INFO 05-24 [executor_base.py:111] # GPU blocks: 7124, # CPU blocks: 2048",
        "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
    ]
    seen = [parser.feed(line) for line in lines]
    assert seen[1] == ("weights_loaded", {"weights_gib": 14.9888})
    assert seen[2] is None
    assert seen[3] == ("kv_cache_sized", {"kv_cache_blocks": 7124})
    assert seen[4] == ("server_listening", {})
    assert parser.version == "0.8.5.post1"


def test_classification_prefers_the_specific_cause_over_the_generic_follow_up():
    lines = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    kind, _, evidence = classify_failure(lines)
    assert kind is FailureKind.OOM_AT_STARTUP
    assert evidence == lines[:1]
    assert classify_failure(["Segmentation fault"])[0] is FailureKind.CRASH
    # Real vLLM 0.32.0's words for a model folder that does not exist (make test-vllm).
    missing = (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/tmp/no-such-model'. Use `repo_type` argument if needed."
    )
    assert classify_failure(["Traceback (most recent call last):", missing])[0] is (
        FailureKind.MODEL_NOT_FOUND
    )


def test_the_socket_folder_lives_only_while_the_engine_runs(tmp_path, model_dir):
    engine = engine_for(tmp_path, model_dir)
    sockets = Path(engine.env["VLLM_RPC_BASE_PATH"])
    engine.start()
    try:
        assert sockets.is_dir()
    finally:
        engine.stop()
    assert not sockets.exists()
    engine.start()  # a restart (the watchdog's) recreates it
    try:
        assert sockets.is_dir()
    finally:
        engine.stop()


def test_its_environment_shares_the_weights_cache_and_holds_a_token_only_when_given(tmp_path):
    cache = tmp_path / "weights"
    env = vllm_env(tmp_path / "trial", hf_home=cache, hf_token="hf_abc", hub_offline=True, base={})
    assert env["HF_HOME"] == str(cache) and env["VLLM_CACHE_ROOT"] == str(cache / "vllm")
    assert (env["HF_TOKEN"], env["HF_HUB_OFFLINE"]) == ("hf_abc", "1")
    # The agent's own environment is not inherited: no token unless the job's machine has one.
    bare = vllm_env(tmp_path / "trial", base={"HF_TOKEN": "hf_leak", "PATH": "/bin"})
    assert "HF_TOKEN" not in bare and "HF_HUB_OFFLINE" not in bare
    assert bare["HF_HOME"] == str(tmp_path / "trial" / "cache" / "hf")


def test_it_passes_trust_remote_code_only_when_the_job_trusts_the_models_code(tmp_path):
    def argv(**options) -> list[str]:
        return vllm_engine(
            model="org/kimi", config={}, workdir=tmp_path, served_model_name="kimi", **options
        ).argv

    assert "--trust-remote-code" not in argv()
    trusted = argv(trust_remote_code=True)
    assert trusted[trusted.index("kimi") + 1] == "--trust-remote-code"
