"""``benchsite-agent run`` as a process against a real ASGI server (Daphne, PostgreSQL and
channels-redis): a whole run over the socket, the REST fallback when the socket never opens,
and a site that is down for the whole run and receives everything once it is back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from runs.models import AgentMessageRecord, Run
from runs.pod_job import run_job_spec

from .live_server import ROOT, daphne_server, free_port
from .test_agent_runs import assert_site_holds_the_journal, new_sim_run

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]

# The simulator 10x faster than the GPU it models (results are rescaled and labelled).
SIM_SPEED = 10.0


def write_job(run: Run, tmp_path, *, ws_url: str, rest_url: str | None):
    job = run_job_spec(run, ws_url=ws_url, rest_url=rest_url)
    job = job.model_copy(update={"engine": job.engine.model_copy(update={"sim_speed": SIM_SPEED})})
    path = tmp_path / "job.json"
    path.write_text(job.model_dump_json())
    return path


def start_agent(job_path, workdir, token: str) -> subprocess.Popen:
    env = {**os.environ, "BENCHSITE_TOKEN": token}
    env.pop("BENCHSITE_JOB", None)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agents.cli",
            "run",
            "--job",
            str(job_path),
            "--workdir",
            str(workdir),
            "--drain-timeout",
            "120",
            "--deadline-margin",
            "0",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def journal_of(workdir) -> list[dict]:
    path = workdir / "messages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_two_trial_run_streams_over_a_real_socket_into_the_site(alice, tmp_path):
    run, token = new_sim_run(alice.org)
    with daphne_server() as address:
        # The socket carries the messages; REST only issues the agent its epoch.
        job_path = write_job(
            run,
            tmp_path,
            ws_url=f"ws://{address}/ws/agent/runs/{run.id}/",
            rest_url=f"http://{address}/api/v1/",
        )
        agent = start_agent(job_path, tmp_path / "work", token)
        output, _ = agent.communicate(timeout=300)
    assert agent.returncode == 0, output
    journal = journal_of(tmp_path / "work")
    assert [m["trial"] for m in journal if m["type"] == "trial_finished"] == [0, 1]
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert_site_holds_the_journal(run, journal)


def test_the_rest_batch_delivers_a_run_whose_socket_never_opens(alice, tmp_path):
    run, token = new_sim_run(alice.org)
    with daphne_server() as address:
        closed = free_port()  # nothing listens here: every socket attempt fails
        job_path = write_job(
            run,
            tmp_path,
            ws_url=f"ws://127.0.0.1:{closed}/ws/agent/runs/{run.id}/",
            rest_url=f"http://{address}/api/v1/",
        )
        agent = start_agent(job_path, tmp_path / "work", token)
        output, _ = agent.communicate(timeout=300)
    assert agent.returncode == 0, output
    assert "Run summary — SIMULATED" in output
    assert token not in output
    journal = journal_of(tmp_path / "work")
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert_site_holds_the_journal(run, journal)


def test_a_site_down_for_the_whole_run_gets_everything_once_it_is_back(alice, tmp_path):
    run, token = new_sim_run(alice.org)
    port = free_port()
    job_path = write_job(
        run,
        tmp_path,
        ws_url=f"ws://127.0.0.1:{port}/ws/agent/runs/{run.id}/",
        rest_url=f"http://127.0.0.1:{port}/api/v1/",
    )
    workdir = tmp_path / "work"
    agent = start_agent(job_path, workdir, token)
    try:
        deadline = time.monotonic() + 240
        while not any(m["type"] == "run_finished" for m in journal_of(workdir)):
            assert agent.poll() is None, agent.stdout.read()
            assert time.monotonic() < deadline, "the run did not finish"
            time.sleep(0.2)
        assert not AgentMessageRecord.objects.filter(run=run).exists()
        with daphne_server(port=port):
            output, _ = agent.communicate(timeout=180)
    finally:
        if agent.poll() is None:
            agent.kill()
    assert agent.returncode == 0, output
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert_site_holds_the_journal(run, journal_of(workdir))
