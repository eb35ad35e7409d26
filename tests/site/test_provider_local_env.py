"""The local provider's agent gets an allow-listed environment, never the worker's: the real
``benchsite-agent run`` process is started and its environment read from ``/proc``."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path

import pytest

from runs.providers.base import PodSpec, PodState, pod_name
from runs.providers.local import LocalProvider
from tests.agents.test_runner import make_job
from tests.polling import wait_for

pytestmark = pytest.mark.slow

SITE_SECRETS = {
    "SECRET_KEY": "recognizable-secret-key-4417",
    "CREDENTIALS_ENCRYPTION_KEY": "recognizable-encryption-key-4417",
    "DATABASE_URL": "postgres://site:recognizable-password-4417@127.0.0.1/site",
}


def environment_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    pairs = (entry.decode().partition("=") for entry in raw.split(b"\0") if entry)
    return {key: value for key, _, value in pairs}


def test_it_hands_the_agent_none_of_the_sites_secrets(tmp_path, monkeypatch):
    for key, value in SITE_SECRETS.items():
        monkeypatch.setenv(key, value)
    # One of the agent's own host settings: it must still arrive (the simulator in wall time
    # also keeps the agent running while its environment is read).
    monkeypatch.setenv("BENCHSITE_SIM_OVER_HTTP", "1")
    job = make_job([{"max_num_seqs": 8}], concurrency=(1,), requests=400, speed=1)
    encoded = base64.b64encode(job.model_dump_json().encode()).decode()
    provider = LocalProvider(tmp_path, extra_env={"BENCHSITE_HANG_SECONDS": "60"})
    name = pod_name(uuid.uuid4())
    spec = PodSpec(
        name=name,
        image="local",
        gpu_type_id="H100",
        gpu_count=1,
        cloud_type="SECURE",
        env={"BENCHSITE_JOB": encoded},
    )
    provider.create(spec)
    try:
        # The agent has started its engine: it read its job and settings from this environment.
        sim_log = tmp_path / name / "run" / "trial-0" / "sim.log"
        wait_for(lambda: sim_log.exists(), 60, "the agent to start the simulator")
        assert provider.status(name).state is PodState.RUNNING
        pid = json.loads((tmp_path / f"{name}.json").read_text())["pid"]
        environment = environment_of(pid)
    finally:
        provider.terminate(name)
    leaked = {key for key, value in environment.items() if value in SITE_SECRETS.values()}
    assert leaked == set() and not SITE_SECRETS.keys() & environment.keys()
    assert environment["BENCHSITE_JOB"] == encoded  # the pod's own
    assert environment["BENCHSITE_HANG_SECONDS"] == "60"  # the operator's extra
    assert environment["BENCHSITE_SIM_OVER_HTTP"] == "1"  # an allowed host setting
    assert environment["PATH"]
