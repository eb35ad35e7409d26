"""The local provider leaves no zombie (issue 14 item 9): an agent that exits is reaped by the
process that started it, whichever process stopped it and whatever that process does next.

In a Celery worker the pool process that provisioned a run is rarely the one that finalizes
it: another process terminates the agent and removes its record, and the parent, which never
hears of that pod again, must still read its child's exit status.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from runs.providers.base import PodSpec, PodState, pod_name
from runs.providers.local import LocalProvider
from tests.polling import wait_for
from tests.site.live_server import ROOT

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
QUICK = [sys.executable, "-c", "pass"]


def spec(name: str) -> PodSpec:
    return PodSpec(
        name=name,
        image="local",
        gpu_type_id="NVIDIA H100 80GB HBM3",
        gpu_count=1,
        cloud_type="SECURE",
        env={"BENCHSITE_JOB": "e30=", "BENCHSITE_TOKEN": "bsr_secret"},
    )


def process_state(pid: int) -> str | None:
    """The kernel's state letter of ``pid`` ("Z" for a zombie), None once it is reaped."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    return next(line.split()[1] for line in status.splitlines() if line.startswith("State:"))


def test_it_reaps_an_agent_that_another_process_terminated(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=SLEEPER)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    pid = json.loads((tmp_path / f"{name}.json").read_text())["pid"]
    # Another worker process finalizes the run: it stops the agent and removes the record.
    other = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from runs.providers.local import "
            "LocalProvider; LocalProvider(Path(sys.argv[1])).terminate(sys.argv[2])",
            str(tmp_path),
            name,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert other.returncode == 0, other.stderr
    assert not (tmp_path / f"{name}.json").exists()
    # This process's next provider call concerns other pods; the agent is reaped all the same.
    assert provider.list_bench_pods() == []
    wait_for(lambda: process_state(pid) is None, timeout=5, what=f"pid {pid} to be reaped")


def test_it_reaps_an_agent_that_exits_on_its_own_before_any_provider_call(tmp_path):
    provider = LocalProvider(tmp_path, agent_command=QUICK)
    name = pod_name(uuid.uuid4())
    provider.create(spec(name))
    pid = json.loads((tmp_path / f"{name}.json").read_text())["pid"]
    wait_for(lambda: process_state(pid) is None, timeout=10, what=f"pid {pid} to be reaped")
    assert provider.status(name).state is PodState.EXITED
    provider.terminate(name)
    assert provider.list_bench_pods() == []
