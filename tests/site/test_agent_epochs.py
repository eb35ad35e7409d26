"""Sequence spaces of agents (issue 14 item 6): each agent start without its spool gets an
epoch from the site and numbers from 0 within it; the ledger stores (run, epoch, seq) once, a
resend with the same content is acknowledged, one with other content is refused as a
conflict and counted on the run. Forged messages, a restarted agent without its workdir (real
agent processes against Daphne), resends and a previous agent's late messages."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys

import pytest
from asgiref.sync import sync_to_async
from rest_framework.test import APIClient

from agents.protocol import parse_agent_message
from runs.models import AgentMessageRecord, Measurement, Run
from runs.services.ingest import message_digest
from tests.polling import wait_for

from .live_server import ROOT, daphne_server
from .test_agent_ingest import _agent_socket, _new_run, messages
from .test_agent_runs import SIM_WORKLOAD, Site, new_sim_run, run_agent
from .test_live_agent import journal_of, write_job

pytestmark = pytest.mark.django_db(transaction=True)


def _agent_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _issue_epoch(run: Run, token: str) -> int:
    response = _agent_client(token).post(f"/api/v1/agent/runs/{run.id}/epoch/")
    assert response.status_code == 200, response.content
    return response.json()["epoch"]


def _post(run: Run, token: str, batch: list[dict]) -> dict:
    response = _agent_client(token).post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200, response.content
    return response.json()


def _in_epoch(batch: list[dict], epoch: int) -> list[dict]:
    return [{**message, "protocol": 2, "epoch": epoch} for message in batch]


def test_it_issues_every_agent_start_a_new_epoch_for_its_own_run_only(alice):
    run, token = _new_run(alice.org)
    other, _ = _new_run(alice.org)
    assert [_issue_epoch(run, token) for _ in range(3)] == [1, 2, 3]
    url = f"/api/v1/agent/runs/{other.id}/epoch/"
    assert _agent_client(token).post(url).status_code == 401  # a token of another run
    assert alice.client().post(f"/api/v1/agent/runs/{run.id}/epoch/").status_code == 401
    other.refresh_from_db()
    assert other.agent_epoch == 0
    # An epoch the site never issued is refused, naming it; nothing is stored.
    body = _post(run, token, _in_epoch(messages(run.id)[:1], 4))
    assert body["acked"] == [] and "epoch 4 was never issued" in body["rejected"][0]["reason"]
    assert not AgentMessageRecord.objects.filter(run=run).exists()


def test_it_stores_the_real_agents_run_after_501_forged_heartbeats(alice, tmp_path):
    """The report: 501 heartbeats with seq 0-500, forged with the run's token, made every
    message of the real agent look stored; the site kept 0 measurements of a 'succeeded' run."""
    run, token = new_sim_run(alice.org)
    forged = [
        {"protocol": 1, "type": "heartbeat", "run_id": str(run.id), "seq": seq}
        for seq in range(501)
    ]
    assert _post(run, token, forged)["acked"] == list(range(501))  # looks like any agent's
    # The same numbers again with other content: refused as conflicts, never acked.
    replays = [{**message, "trial": 7} for message in forged]
    body = _post(run, token, replays)
    assert body["acked"] == []
    assert len(body["rejected"]) == 501
    assert all(r["reason"].startswith("conflict: epoch 0, seq ") for r in body["rejected"])
    assert "trial" not in body["rejected"][0]["reason"]  # no content echoed

    result, journal = run_agent(run, token, tmp_path, Site(run.id, token))
    assert result.exit_code == 0 and result.delivery.rejected == []
    assert result.delivery.epoch == 1
    run.refresh_from_db()
    assert run.state == "succeeded"
    real = {r.seq: r for r in AgentMessageRecord.objects.filter(run=run, epoch=1)}
    assert sorted(real) == [m["seq"] for m in journal] == list(range(len(journal)))
    assert real[len(journal) - 1].type == "run_finished"
    sent = [m["result"] for m in journal if m["type"] == "measurement"]
    assert len(sent) == 4
    rows = Measurement.objects.filter(trial__run=run).order_by("trial__index", "id")
    assert list(rows.values_list("result", flat=True)) == sent
    assert AgentMessageRecord.objects.filter(run=run, epoch=0).count() == 501  # the forgeries
    # Surfaced with the run, in the API a member reads.
    shown = alice.client().get(f"/api/v1/orgs/{alice.org.slug}/runs/{run.id}/").json()
    assert shown["agent_conflicts"] == 501
    assert "a heartbeat at epoch 0, seq " in shown["agent_conflict_last"]


async def test_it_acks_a_resend_once_and_refuses_other_content_on_the_same_seq(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    epoch = await sync_to_async(_issue_epoch)(run, token)
    measurement = _in_epoch(messages(run.id), epoch)[4]
    socket = await _agent_socket(run.id, token)
    assert (await socket.connect())[0]
    for _ in range(2):
        await socket.send_json_to(measurement)
        assert await socket.receive_json_from() == {"type": "ack", "seq": 4}
    other = {**measurement, "result": {**measurement["result"], "completed": 99}}
    await socket.send_json_to(other)
    reply = await socket.receive_json_from()
    assert reply["type"] == "rejected" and reply["seq"] == 4
    assert reply["reason"].startswith(f"conflict: epoch {epoch}, seq 4 is stored")
    # The socket stays open for the next message (only an ended run closes it).
    await socket.send_json_to(_in_epoch(messages(run.id), epoch)[0])
    assert await socket.receive_json_from() == {"type": "ack", "seq": 0}
    await socket.disconnect()

    def stored():
        run.refresh_from_db()
        rows = list(Measurement.objects.filter(trial__run=run).values_list("result", flat=True))
        return AgentMessageRecord.objects.filter(run=run).count(), rows, run.agent_conflicts

    count, rows, conflicts = await sync_to_async(stored)()
    assert (count, conflicts) == (2, 1)
    assert [row["completed"] for row in rows] == [100]  # the first content stands


def test_it_acks_a_resend_whose_stored_copy_wrote_a_number_another_way(alice):
    """A message stored before a field became typed (``duration`` 30 kept as ``30``; it is
    ``30.0`` now) and resent after the upgrade: the same content, so a resend, not a
    conflict, though the digests differ."""
    run, token = _new_run(alice.org)
    measurement = messages(run.id)[4]
    measurement["result"] = {**measurement["result"], "duration": 30}
    # What the site stored when ``result`` was a free-form object: the figure as sent.
    as_stored_before = parse_agent_message(measurement).model_dump(mode="json")
    as_stored_before["result"]["duration"] = 30
    AgentMessageRecord.objects.create(
        organization=run.organization,
        run=run,
        epoch=0,
        seq=4,
        type="measurement",
        payload=as_stored_before,
        digest=message_digest(as_stored_before),
    )
    body = _post(run, token, [measurement])
    assert (body["acked"], body["rejected"]) == ([4], [])
    run.refresh_from_db()
    assert run.agent_conflicts == 0
    # Other content on that seq is still a conflict.
    other = {**measurement, "result": {**measurement["result"], "completed": 99}}
    assert _post(run, token, [other])["rejected"][0]["reason"].startswith("conflict: ")


def test_it_takes_a_previous_agents_late_messages_once_in_their_own_epoch(alice):
    run, token = _new_run(alice.org)
    first, second = _issue_epoch(run, token), _issue_epoch(run, token)
    whole = messages(run.id)
    # The second agent (restarted without the spool) sends its run but for the end.
    body = _post(run, token, _in_epoch(whole[:6], second))
    assert body["acked"] == [0, 1, 2, 3, 4, 5]
    # The first agent's spool is flushed late: its numbers overlap, its space does not.
    late = _in_epoch(whole[:5], first)
    assert _post(run, token, late)["acked"] == [0, 1, 2, 3, 4]
    assert _post(run, token, late)["acked"] == [0, 1, 2, 3, 4]  # a resend: acked, not stored
    assert _post(run, token, _in_epoch(whole[6:], second))["acked"] == [6]
    run.refresh_from_db()
    assert run.state == "succeeded" and run.agent_conflicts == 0
    by_epoch = AgentMessageRecord.objects.filter(run=run).values_list("epoch", "seq")
    assert sorted(by_epoch) == [(first, s) for s in range(5)] + [(second, s) for s in range(7)]
    assert Measurement.objects.filter(trial__run=run).count() == 2  # one per agent


def test_it_waits_for_every_message_of_the_finishing_agents_own_epoch(alice):
    run, token = _new_run(alice.org)
    epoch = _issue_epoch(run, token)
    whole = messages(run.id)
    # Epoch 0 holds seq 0-2 (say, an agent of protocol 1): they do not fill epoch 1's gaps.
    _post(run, token, [{**m, "protocol": 1} for m in whole[:3]])
    _post(run, token, _in_epoch([whole[0], whole[1], whole[5], whole[6]], epoch))
    run.refresh_from_db()
    assert run.state == "finalizing"
    _post(run, token, _in_epoch(whole[2:5], epoch))
    run.refresh_from_db()
    assert run.state == "succeeded"


def _start_agent(job_path, workdir, token: str) -> subprocess.Popen:
    env = {**os.environ, "BENCHSITE_TOKEN": token}
    env.pop("BENCHSITE_JOB", None)
    command = [sys.executable, "-m", "agents.cli", "run", "--job", str(job_path)]
    command += ["--workdir", str(workdir), "--drain-timeout", "60", "--deadline-margin", "0"]
    # Its own process group: a SIGKILL takes its simulator along, as a pod's end would.
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.usefixtures("sim_over_http")
@pytest.mark.needs_redis
@pytest.mark.slow
def test_an_agent_restarted_without_its_workdir_loses_nothing(alice, tmp_path):
    run, token = new_sim_run(
        alice.org,
        serve_grid={"max_num_seqs": [8]},
        workload=SIM_WORKLOAD | {"concurrency": [1, 2, 4]},
    )
    with daphne_server() as address:
        job_path = write_job(
            run,
            tmp_path,
            ws_url=f"ws://{address}/ws/agent/runs/{run.id}/",
            rest_url=f"http://{address}/api/v1/",
        )
        first = _start_agent(job_path, tmp_path / "pod-1", token)
        try:
            wait_for(
                lambda: AgentMessageRecord.objects.filter(run=run, type="measurement").exists(),
                timeout=120,
                what="the first agent's first level",
            )
        finally:
            # The pod is gone, and its disk with it: the agent and its engine (which runs
            # in a session of its own) are killed.
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate(timeout=30)
            for message in journal_of(tmp_path / "pod-1"):
                if message["type"] == "cold_start_phase" and message["phase"] == "process_start":
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(message["detail"]["pid"], signal.SIGKILL)
        # A resumed pod on a fresh disk: the same job, no spool, no journal.
        second = _start_agent(job_path, tmp_path / "pod-2", token)
        output, _ = second.communicate(timeout=240)
    assert second.returncode == 0, output
    journal = journal_of(tmp_path / "pod-2")
    # Every level the second agent measured is stored (it numbered from 0, as the first had).
    sent = [m["result"] for m in journal if m["type"] == "measurement"]
    assert len(sent) == 3
    rows = list(Measurement.objects.filter(trial__run=run).values_list("result", flat=True))
    assert all(result in rows for result in sent)
    run.refresh_from_db()
    assert run.state == "succeeded" and run.agent_conflicts == 0
    assert run.agent_epoch == 2
    stored = dict(AgentMessageRecord.objects.filter(run=run, epoch=2).values_list("seq", "type"))
    assert stored == {m["seq"]: m["type"] for m in journal}  # from seq 0, nothing dropped
    # What the first agent delivered stays, in its own epoch, as it sent it.
    first = {m["seq"]: m["type"] for m in journal_of(tmp_path / "pod-1")}
    kept = AgentMessageRecord.objects.filter(run=run, epoch=1).values_list("seq", "type")
    assert kept and all(first[seq] == kind for seq, kind in kept)
