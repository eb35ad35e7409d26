"""``benchsite-agent engine-up`` and ``serve-sim``: phases as they happen, clear refusals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from agents.cli import main
from agents.cli.usage import EXIT_ENGINE_FAILED, EXIT_USAGE
from agents.engines.launch import EngineConfigError, engine_from_config


def test_engine_configs_are_checked_key_by_key(tmp_path):
    with pytest.raises(EngineConfigError) as caught:
        engine_from_config(
            {"engine": "sim", "gpu": "H100", "speed": True, "bogus": 1}, workdir=tmp_path
        )
    message = str(caught.value)
    assert "bogus: unknown key" in message
    assert "speed: a boolean is not allowed" in message
    assert "model_spec: required" in message
    with pytest.raises(EngineConfigError, match=r"serve\.max_num_seqs"):
        engine_from_config(
            {
                "engine": "sim",
                "model_spec": "llama-3.1-8b",
                "gpu": "H100",
                "serve": {"max_num_seqs": -1},
            },
            workdir=tmp_path,
        )
    with pytest.raises(EngineConfigError, match="expected 'vllm' or 'sim'"):
        engine_from_config({"engine": "tgi"}, workdir=tmp_path)


def test_engine_up_refuses_a_bad_file_with_exit_2(tmp_path, capsys):
    path = tmp_path / "engine.json"
    path.write_text("[1, 2]")
    assert main(["engine-up", "--config", str(path)]) == EXIT_USAGE
    assert "expected a JSON object" in capsys.readouterr().err


@pytest.mark.slow
def test_engine_up_prints_the_failure_class_and_evidence(tmp_path, capsys):
    path = tmp_path / "engine.json"
    path.write_text(
        json.dumps(
            {
                "engine": "sim",
                "model_spec": "llama-3.1-70b",
                "gpu": "L40S",
                "startup_speed": 1000,
                "serve": {"max_model_len": 4096},
            }
        )
    )
    code = main(["engine-up", "--config", str(path), "--workdir", str(tmp_path / "w")])
    assert code == EXIT_ENGINE_FAILED
    err = capsys.readouterr().err
    assert "oom_at_startup" in err and "CUDA out of memory" in err


@pytest.mark.slow
def test_engine_up_serves_until_ctrl_c(tmp_path):
    path = tmp_path / "engine.json"
    path.write_text(
        json.dumps(
            {
                "engine": "sim",
                "model_spec": "llama-3.1-8b",
                "gpu": "H100",
                "startup_speed": 1000,
                "served_model_name": "m",
                "serve": {"max_model_len": 4096},
            }
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "agents.cli", "engine-up", "--config", str(path)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(__import__("pathlib").Path.cwd())},
        # A shell that starts the test run in the background ignores SIGINT, and the child
        # would inherit that: give it the default, as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            lines.append(line)
            if line.startswith("serving"):
                break
        assert "SIMULATED" in lines[-1], lines
        assert any("kv_cache_sized" in line for line in lines)
        url = lines[-1].split(" at ")[1].split(";")[0]
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_sim_refuses_a_config_the_schema_refuses(tmp_path, capsys):
    config = tmp_path / "serve.json"
    config.write_text(json.dumps({"max_num_seqs": "8"}))
    code = main(
        ["serve-sim", "--model-spec", "llama-3.1-8b", "--gpu", "H100", "--config", str(config)]
    )
    assert code == EXIT_USAGE
    assert "max_num_seqs" in capsys.readouterr().err
