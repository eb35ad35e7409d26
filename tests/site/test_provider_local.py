"""The local provider: agent processes as pods, found again by name, stopped for good."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest

from runs.providers.base import PermanentProviderError, PodSpec, PodState, pod_name
from runs.providers.local import LocalProvider
from tests.polling import wait_for

# Stands in for the agent: prints what it was given, then waits to be stopped.
SLEEPER = [
    sys.executable,
    "-c",
    "import os, sys, time; print(os.environ['BENCHSITE_JOB'], sys.argv[1:], flush=True); "
    "time.sleep(120)",
]
QUICK = [sys.executable, "-c", "pass"]


def spec(name: str) -> PodSpec:
    return PodSpec(
        name=name,
        image="local",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=1,
        cloud_type="SECURE",
        env={"BENCHSITE_JOB": "eyJqb2IiOiAxfQ==", "BENCHSITE_TOKEN": "bsr_secret"},
    )


def test_a_pod_is_created_found_by_name_and_terminated_for_good(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=SLEEPER)
    name = pod_name(uuid.uuid4())
    assert provider.find_by_name(name) is None
    created = provider.create(spec(name))
    assert created.state is PodState.RUNNING and created.pod_id == name
    log = tmp_path / name / "agent.log"
    wait_for(lambda: log.exists() and "eyJqb2IiOiAxfQ==" in log.read_text())
    assert "--workdir" in log.read_text()  # the agent is told where its results go
    # A fresh provider (a restarted worker) finds it from the record.
    again = LocalProvider(tmp_path, agent_command=SLEEPER)
    assert again.find_by_name(name).state is PodState.RUNNING
    assert [pod.name for pod in again.list_bench_pods()] == [name]
    pid = json.loads((tmp_path / f"{name}.json").read_text())["pid"]
    again.terminate(name)
    assert provider.find_by_name(name) is None and provider.list_bench_pods() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    again.terminate(name)  # idempotent


def test_an_agent_that_ended_reads_exited(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=QUICK)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    wait_for(lambda: provider.status(name).state is PodState.EXITED)
    provider.terminate(name)
    assert provider.status(name) is None


def test_a_second_create_under_one_name_is_refused_and_names_are_checked(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=SLEEPER)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    try:
        with pytest.raises(PermanentProviderError, match="exists already"):
            provider.create(spec(name))
        with pytest.raises(PermanentProviderError, match="not a pod name"):
            provider.find_by_name("../etc/passwd")
    finally:
        provider.terminate(name)


def test_the_token_is_not_in_the_record(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=QUICK)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    assert "bsr_secret" not in (tmp_path / f"{name}.json").read_text()
    assert "bsr_secret" not in repr(spec(name))
    provider.terminate(name)


# Stands in for an agent whose engine runs in a session of its own (as the agent starts
# vLLM) and that does not stop it: it writes the engine's pid, then waits.
AGENT_WITH_ENGINE = [
    sys.executable,
    "-c",
    "import subprocess, sys, time\n"
    "engine = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
    " start_new_session=True)\n"
    "print('engine', engine.pid, flush=True)\n"
    "time.sleep(120)",
]


def test_terminate_also_stops_an_engine_in_its_own_session(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=AGENT_WITH_ENGINE)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    log = tmp_path / name / "agent.log"
    wait_for(lambda: log.exists() and "engine " in log.read_text())
    engine_pid = int(log.read_text().split("engine ")[1].split()[0])
    os.kill(engine_pid, 0)  # running, outside the agent's process group
    assert os.getpgid(engine_pid) != json.loads((tmp_path / f"{name}.json").read_text())["pid"]
    provider.terminate(name)
    # Not a zombie of ours either: its parent was the agent, gone now; init reaps it.
    wait_for(lambda: not _running(engine_pid))


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
