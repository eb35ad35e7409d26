"""The local provider leaves an agent that was asked to stop its delivery grace, and kills
what is left once the grace is over (issue 14 item 5c)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import pytest

from runs.providers import local
from runs.providers.base import PodSpec, PodState, pod_name
from runs.providers.local import LocalProvider
from tests.polling import wait_for

# Stands in for an agent that has finished and only delivers: SIGTERM does not end it.
DELIVERING = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, lambda *a: print('asked', flush=True));"
    " print('up', flush=True); time.sleep(120)",
]


def spec(name: str) -> PodSpec:
    return PodSpec(
        name=name, image="local", gpu_type_id="g", gpu_count=1, cloud_type="SECURE", env={}
    )


def test_it_asks_a_delivering_agent_once_and_kills_it_only_after_the_grace(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "STOP_GRACE_SECONDS", 0.2)
    provider = LocalProvider(tmp_path, agent_command=DELIVERING, delivery_grace=60)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    log = tmp_path / name / "agent.log"
    wait_for(lambda: "up" in log.read_text(), what="the agent to start")
    provider.terminate(name)
    provider.terminate(name)  # a second call inside the grace does not ask again
    assert provider.status(name).state is PodState.RUNNING
    wait_for(lambda: "asked" in log.read_text(), what="the agent to be asked")
    assert log.read_text().count("asked") == 1
    record_path = tmp_path / f"{name}.json"
    record = json.loads(record_path.read_text())
    # The grace is over: what is left is killed, the record goes.
    record["stop_asked_at"] = time.time() - 61
    record_path.write_text(json.dumps(record))
    provider.terminate(name)
    assert provider.status(name) is None
    with pytest.raises(ProcessLookupError):
        os.kill(record["pid"], 0)
