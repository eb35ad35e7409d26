"""What the tests of runs on Runpod set up alike: the fake Runpod API with the real SDK
pointed at it, an organization's key, the site served for the pods' agents, the pod's agent
and a run started through the API."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from runs.actors import Actor
from runs.services.credentials import provider_key_set
from tests.fakes.runpod_api import FakeRunpodApi

from .live_server import daphne_server

# The pod's entrypoint: the agent, with the job's engine swapped for the simulator (this
# machine has no GPU), 10x faster than the modelled H100; results stay in the H100's time.
POD_AGENT = """
import base64, json, os, sys
job = json.loads(base64.b64decode(os.environ["BENCHSITE_JOB"]))
job["engine"].update(kind="sim", sim_speed=10.0)
os.environ["BENCHSITE_JOB"] = base64.b64encode(json.dumps(job).encode()).decode()
os.execv(sys.executable, [sys.executable, "-m", "agents.cli", "run", "--workdir",
         os.path.join(os.environ["POD_WORKDIR"], os.environ["RUNPOD_POD_ID"])])
"""
SIM_AGENT = [sys.executable, "-c", POD_AGENT]


@contextlib.contextmanager
def fake_runpod(
    keys: Sequence[str],
    *,
    agent_command: Sequence[str],
    monkeypatch,
    settings,
    pods_dir: Path | None = None,
    latency: float = 0.0,
) -> Iterator[FakeRunpodApi]:
    """The fake Runpod API with one account per key, the SDK pointed at it and vLLM runs
    sent to Runpod; each pod's agent works under ``pods_dir``/POD_ID."""
    fake = FakeRunpodApi(
        api_keys=tuple(keys),
        agent_command=list(agent_command),
        agent_env={"POD_WORKDIR": str(pods_dir)} if pods_dir is not None else None,
        latency=latency,
    )
    with fake:
        fake.point_sdk_at_me(monkeypatch)
        settings.BENCHSITE_PROVIDER = "runpod"
        yield fake


@contextlib.contextmanager
def runpod_account(
    person, key: str, *, agent_command: Sequence[str], monkeypatch, settings, tmp_path: Path
) -> Iterator[FakeRunpodApi]:
    """``fake_runpod`` with one account, whose ``key`` is ``person``'s organization's Runpod
    key; pods work under ``tmp_path``/pods."""
    with fake_runpod(
        (key,),
        agent_command=agent_command,
        monkeypatch=monkeypatch,
        settings=settings,
        pods_dir=tmp_path / "pods",
    ) as fake:
        store_runpod_key(person, key)
        yield fake


@contextlib.contextmanager
def runpod_site(
    person, key: str, *, monkeypatch, settings, tmp_path: Path, agent_command=SIM_AGENT
) -> Iterator[FakeRunpodApi]:
    """``runpod_account``, and the site served by Daphne for its pods' agents to report to."""
    with (
        runpod_account(
            person,
            key,
            agent_command=agent_command,
            monkeypatch=monkeypatch,
            settings=settings,
            tmp_path=tmp_path,
        ) as fake,
        daphne_server() as address,
    ):
        settings.BENCHSITE_PUBLIC_URL = f"http://{address}"
        yield fake


def store_runpod_key(person, key: str) -> None:
    """``person``'s organization sets its Runpod key, as from the settings page."""
    provider_key_set(
        actor=Actor(user=person.user, via="web"), org=person.org, provider="runpod", api_key=key
    )


def post_run(person, experiment, reason: str = "test"):
    """``person`` starts a run of ``experiment`` through the REST API; the response."""
    return person.client().post(
        f"/api/v1/orgs/{person.org.slug}/runs/",
        {"experiment": str(experiment.id), "reason": reason},
        format="json",
    )
