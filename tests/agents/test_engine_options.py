"""How this machine runs engines, read from the agent's environment (``EngineOptions``)."""

from __future__ import annotations

import pytest

from agents.cli import main
from agents.runner.trial_engine import EngineOptions
from tests.agents.test_runner import make_job


def test_it_reads_the_vllm_command_cpu_and_extra_environment():
    options = EngineOptions.from_environment(
        {
            "BENCHSITE_VLLM_COMMAND": "/opt/vllm/bin/vllm serve",
            "BENCHSITE_VLLM_CPU": "1",
            "BENCHSITE_VLLM_ENV": "HF_HOME='/srv/hf cache' HF_HUB_OFFLINE=1 EMPTY=",
        }
    )
    assert options.vllm_command == ("/opt/vllm/bin/vllm", "serve")
    assert options.cpu is True
    assert dict(options.vllm_env) == {
        "HF_HOME": "/srv/hf cache",
        "HF_HUB_OFFLINE": "1",
        "EMPTY": "",
    }


def test_it_defaults_to_vllm_on_the_path_with_no_extra_environment():
    options = EngineOptions.from_environment({})
    assert options.vllm_command == ("vllm", "serve")
    assert options.cpu is False
    assert dict(options.vllm_env) == {}


@pytest.mark.parametrize("value", ["HF_HOME", "=1", "1X=2", "HF_HOME='/unclosed"])
def test_it_refuses_an_extra_environment_that_is_not_key_value_words(value):
    with pytest.raises(ValueError, match="BENCHSITE_VLLM_ENV"):
        EngineOptions.from_environment({"BENCHSITE_VLLM_ENV": value})


def test_the_agent_stops_with_one_line_for_a_bad_vllm_env_before_anything_starts(
    tmp_path, capsys, monkeypatch
):
    path = tmp_path / "job.json"
    path.write_text(make_job([{"max_num_seqs": 4}]).model_dump_json())
    monkeypatch.setenv("BENCHSITE_VLLM_ENV", "HF_HOME")
    assert main(["run", "--job", str(path), "--workdir", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "BENCHSITE_VLLM_ENV: expected KEY=VALUE words" in err and "Traceback" not in err
    assert not (tmp_path / "w").exists()
