"""Whole runs end to end (issue 5): the real agent runner with the simulator, its outbox and
spool, streaming into the site's ingest consumer through Channels' communicator — with the
socket cut, a cancel from the site, and the deadline."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import gc
import threading
import time
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from rest_framework.test import APIClient

from agents.runner.session import run_session
from agents.runner.site_link import LinkDown, SiteRefused
from agents.runner.summary import read_journal
from agents.runner.trial_engine import EngineOptions
from benchsite.asgi import application
from runs.actors import Actor
from runs.models import AgentMessageRecord, Measurement, Run, Trial
from runs.pod_job import run_job_spec
from runs.services.run_control import run_cancel
from runs.services.run_tokens import run_token_issue

from .conftest import frozen, make_experiment, make_model

pytestmark = pytest.mark.django_db(transaction=True)

FAST_STARTUP = EngineOptions(sim_startup_speed=1000, startup_timeout=60)
# A run that lasts (the simulator served over HTTP in wall time): for a cancel or a deadline
# that must land inside a level.
WALL_TIME = dataclasses.replace(FAST_STARTUP, sim_over_http=True)
SIM_WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
    "concurrency": [1, 4],
    "requests_per_level": 8,
}


@pytest.fixture(autouse=True)
def close_thread_connections():
    """The ingest consumer reaches the database from asgiref's shared thread and from worker
    threads of the outbox's event loop, each with its own connection: close the first there,
    and collect the others' thread-locals once those threads are gone, so the test database
    can be dropped."""
    yield
    connections.close_all()
    asyncio.run(database_sync_to_async(connections.close_all)())
    gc.collect()


def new_sim_run(org, **experiment) -> tuple[Run, str]:
    fields = {
        "name": f"sim-{uuid.uuid4()}",
        "engine": "sim",
        "engine_image_tag": "",
        "serve_grid": {"max_num_seqs": [8, 2]},
        "workload": SIM_WORKLOAD,
        # Judged at p50, which a window of 5 requests can judge (a p99 needs 299): these
        # tests are about the run's way to the site, not about windows.
        "slos": {"ttft_ms": 2000, "ttft_percentile": 50},
    } | experiment
    experiment = make_experiment(org, model=make_model(org), **fields)
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    return run, run_token_issue(run=run)


class CommunicatorConnection:
    """The outbox's ``Connection`` over Channels' test communicator; optionally cut after
    ``cut_after`` sent frames, as a network would (the acks already on their way get a
    moment to arrive first; without any, no agent could ever make progress)."""

    def __init__(self, communicator: WebsocketCommunicator, cut_after: int | None):
        self.communicator = communicator
        self.cut_after = cut_after
        self.sent = 0

    async def send(self, text: str) -> None:
        if self.cut_after is not None and self.sent >= self.cut_after:
            await asyncio.sleep(0.3)
            await self.close()
            raise LinkDown("cut by the test")
        self.sent += 1
        await self.communicator.send_to(text_data=text)

    async def recv(self) -> str:
        # Straight from the queue: the communicator's receive_from cancels the app on timeout.
        while True:
            message = await self.communicator.output_queue.get()
            if message["type"] == "websocket.send":
                return message["text"]
            if message["type"] == "websocket.close":
                raise LinkDown(f"closed with {message.get('code')}")

    async def close(self) -> None:
        await self.communicator.disconnect()


class Site:
    """A connector to the site's ASGI app, counting connections."""

    def __init__(self, run_id, token: str, *, cut_after: int | None = None):
        self.path = f"/ws/agent/runs/{run_id}/"
        self.token = token
        self.cut_after = cut_after
        self.connections = 0

    async def connect(self) -> CommunicatorConnection:
        communicator = WebsocketCommunicator(
            application, self.path, headers=[(b"authorization", f"Bearer {self.token}".encode())]
        )
        connected, code = await communicator.connect(timeout=10)
        if not connected:
            if code == 4404:
                raise SiteRefused("4404")
            raise LinkDown(f"refused with {code}")
        self.connections += 1
        return CommunicatorConnection(communicator, self.cut_after)


def epoch_requester(run_id, token: str):
    """The outbox's epoch request, through the site's real endpoint (the test client stands
    in for HTTP, as the communicator does for the socket)."""

    def request() -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        try:
            response = client.post(f"/api/v1/agent/runs/{run_id}/epoch/")
        finally:
            connections.close_all()  # this executor thread's own connection
        if response.status_code != 200:
            raise LinkDown(f"epoch request got HTTP {response.status_code}")
        return response.json()["epoch"]

    return database_sync_to_async(request, thread_sensitive=False)


def run_agent(
    run: Run,
    token: str,
    tmp_path,
    site: Site,
    *,
    job=None,
    runner_options=None,
    engine_options=FAST_STARTUP,
    **options,
):
    job = job or run_job_spec(
        run, ws_url=f"ws://testserver{site.path}", rest_url="http://testserver/api/v1/"
    )
    result = run_session(
        job,
        token=token,
        workdir=tmp_path,
        engine_options=engine_options,
        connect=site.connect,
        request_epoch=epoch_requester(run.id, token),
        handle_signals=False,
        drain_timeout=60,
        deadline_margin=0,
        runner_options={"metrics_period": 0.2} | (runner_options or {}),
        **options,
    )
    connections.close_all()
    return result, read_journal(result.journal)


def assert_site_holds_the_journal(run: Run, journal: list[dict]) -> None:
    """Every message the agent wrote is stored once, and every measurement equals what the
    agent computed."""
    stored = {r.seq: r.payload for r in AgentMessageRecord.objects.filter(run=run)}
    assert sorted(stored) == [m["seq"] for m in journal] == list(range(len(journal)))
    for message in journal:
        assert stored[message["seq"]]["type"] == message["type"]
    sent = [m for m in journal if m["type"] == "measurement"]
    rows = Measurement.objects.filter(trial__run=run).order_by("trial__index", "id")
    assert [(row.trial.index, row.result) for row in rows] == [
        (m["trial"], m["result"]) for m in sent
    ]
    assert [row.server_metrics for row in rows] == [m["server"] for m in sent]
    assert [row.gpus for row in rows] == [m.get("gpus") or [] for m in sent]


def test_a_two_trial_simulated_run_streams_into_the_site(alice, tmp_path):
    run, token = new_sim_run(alice.org)
    site = Site(run.id, token)
    result, journal = run_agent(run, token, tmp_path, site)
    assert result.exit_code == 0 and result.delivery.pending == 0
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert run.agent_info["agent_version"]
    trials = Trial.objects.filter(run=run).order_by("index")
    assert [(t.index, t.outcome, t.serve_config) for t in trials] == [
        (0, "succeeded", {"max_num_seqs": 8}),
        (1, "succeeded", {"max_num_seqs": 2}),
    ]
    assert all("health_ready" in t.cold_start for t in trials)
    assert Measurement.objects.filter(trial__run=run).count() == 4
    measurement = Measurement.objects.filter(trial__run=run).first()
    assert measurement.result["simulated"] == {"speed": 1.0, "clock": "simulated"}
    assert measurement.result["completed"] == 8
    assert_site_holds_the_journal(run, journal)


@pytest.mark.slow
def test_a_socket_cut_again_and_again_loses_nothing_and_stores_nothing_twice(alice, tmp_path):
    run, token = new_sim_run(alice.org)
    site = Site(run.id, token, cut_after=5)
    result, journal = run_agent(run, token, tmp_path, site)
    assert result.delivery.pending == 0
    assert site.connections >= len(journal) // 5  # it really was cut, many times
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert_site_holds_the_journal(run, journal)


@pytest.mark.slow
def test_a_cancel_from_the_site_stops_the_agent_within_seconds(alice, tmp_path):
    run, token = new_sim_run(
        alice.org,
        workload=SIM_WORKLOAD | {"requests_per_level": 400, "concurrency": [2]},
    )
    site = Site(run.id, token)
    asked: list[float] = []

    def cancel_once_measuring():
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if AgentMessageRecord.objects.filter(run=run, type="level_progress").exists():
                    run_cancel(
                        actor=Actor(user=alice.user, via="web"), run=run, reason="wrong model"
                    )
                    asked.append(time.monotonic())
                    return
                time.sleep(0.05)
        finally:
            connections.close_all()

    canceller = threading.Thread(target=cancel_once_measuring)
    canceller.start()
    started = time.monotonic()
    result, journal = run_agent(run, token, tmp_path, site, engine_options=WALL_TIME)
    canceller.join()
    assert asked, "the run never reached a level"
    finished = next(m for m in journal if m["type"] == "run_finished")
    assert finished["outcome"] == "cancelled" and "wrong model" in finished["reason"]
    assert result.summary.outcome == "cancelled" and result.exit_code == 3
    # Within seconds of the request: the level was cut short, the engine stopped.
    assert finished["sent_at"] - (time.time() - (time.monotonic() - asked[0])) < 10
    assert time.monotonic() - started < 60
    run.refresh_from_db()
    assert run.state == "cancelled"
    partial = [m for m in journal if m["type"] == "measurement"]
    assert partial and partial[0]["result"]["partial"] is True
    assert_site_holds_the_journal(run, journal)


@pytest.mark.slow
def test_the_deadline_stops_the_run_mid_level_and_its_partial_results_arrive(alice, tmp_path):
    run, token = new_sim_run(
        alice.org,
        workload=SIM_WORKLOAD | {"requests_per_level": 2000, "concurrency": [2]},
    )
    site = Site(run.id, token)
    job = run_job_spec(run, ws_url="ws://testserver/", rest_url="http://testserver/api/v1/")
    # The level lasts about 2 min (2,000 requests, 2 at a time, at the simulator's real
    # speed), each request a fraction of a second: the deadline falls inside it with requests
    # done. Its room covers the simulator's start-up on a busy machine (parallel test
    # workers on 2 cores): 12 s was once used up by the start-up alone (0 requests done).
    deadline = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=30)
    job = job.model_copy(update={"deadline": deadline})
    result, journal = run_agent(run, token, tmp_path, site, job=job, engine_options=WALL_TIME)
    assert result.summary.outcome == "deadline"
    assert journal[-1]["type"] == "run_finished" and journal[-1]["outcome"] == "deadline"
    assert journal[-1]["sent_at"] - deadline.timestamp() < 10
    run.refresh_from_db()
    assert run.state == "failed" and "deadline" in run.failure_reason
    rows = list(Measurement.objects.filter(trial__run=run))
    assert len(rows) == 1 and rows[0].result["partial"] is True
    assert 0 < rows[0].result["completed"] < 2000
    outcomes = dict(Trial.objects.filter(run=run).values_list("index", "failure_class"))
    assert outcomes == {0: "deadline", 1: "deadline"}
    assert_site_holds_the_journal(run, journal)
