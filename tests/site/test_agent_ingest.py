"""The agent's ingest socket and REST batch, and the browser's live socket (issue 5, site
side): real Channels consumers through the project's ASGI application."""

from __future__ import annotations

import json
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from rest_framework.test import APIClient

from agents import protocol
from benchsite.asgi import application
from runs.models import AgentMessageRecord, Measurement, ModelSpec, Run, Trial
from runs.services.run_tokens import run_token_issue

from .conftest import frozen, make_experiment, make_model, signed_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def close_consumer_connections():
    """Consumers reach the database from asgiref's worker thread, which keeps its own
    connection; close it so the test database can be dropped at the end."""
    yield
    await database_sync_to_async(connections.close_all)()


RESULT = {
    "completed": 100,
    "failed": 0,
    "duration": 12.5,
    "p99_ttft_ms": 48.2,
    "output_throughput": 1024.0,
    "median_itl_ms": 9.9,
}


def _new_run(org) -> tuple[Run, str]:
    model = ModelSpec.objects.filter(organization=org).first() or make_model(org)
    experiment = make_experiment(org, model=model, name=f"e-{uuid.uuid4()}")
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    return run, run_token_issue(run=run)


def messages(run_id) -> list[dict]:
    """A whole run of one trial, as an agent sends it."""
    rid = str(run_id)
    return [
        {
            "type": "hello",
            "run_id": rid,
            "seq": 0,
            "agent_version": "0.1.0",
            "host": {
                "hostname": "pod-1",
                "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559}],
            },
        },
        {
            "type": "trial_started",
            "run_id": rid,
            "seq": 1,
            "trial": 0,
            "serve_config": {"max_num_seqs": 64},
            "command": ["vllm", "serve", "m", "--max-num-seqs", "64"],
        },
        {
            "type": "cold_start_phase",
            "run_id": rid,
            "seq": 2,
            "trial": 0,
            "phase": "weights_loaded",
            "seconds": 31.5,
        },
        {
            "type": "level_progress",
            "run_id": rid,
            "seq": 3,
            "trial": 0,
            "level": {"concurrency": 8},
            "requests_done": 40,
            "requests_total": 100,
            "ttft_ms_p99": 47.0,
        },
        {
            "type": "measurement",
            "run_id": rid,
            "seq": 4,
            "trial": 0,
            "level": {"concurrency": 8},
            "result": RESULT,
            "server": {"kv_cache_usage_perc": {"max": 0.4}},
        },
        {"type": "trial_finished", "run_id": rid, "seq": 5, "trial": 0, "outcome": "succeeded"},
        {"type": "run_finished", "run_id": rid, "seq": 6, "outcome": "succeeded"},
    ]


async def _agent_socket(run_id, token) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())] if token else []
    return WebsocketCommunicator(application, f"/ws/agent/runs/{run_id}/", headers=headers)


async def test_it_stores_a_whole_run_sent_over_the_socket(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    assert (await socket.connect())[0]
    for message in messages(run.id):
        await socket.send_json_to(message)
        assert await socket.receive_json_from() == {"type": "ack", "seq": message["seq"]}
    await socket.disconnect()

    def stored():
        run.refresh_from_db()
        trial = Trial.objects.get(run=run, index=0)
        measurement = Measurement.objects.get(trial=trial)
        return run, trial, measurement

    run, trial, measurement = await sync_to_async(stored)()
    assert run.state == "succeeded" and run.finished_at is not None
    assert run.agent_info["hostname"] == "pod-1"
    assert trial.command[:2] == ["vllm", "serve"] and trial.outcome == "succeeded"
    assert trial.cold_start == {"weights_loaded": 31.5}
    assert measurement.concurrency == 8
    assert measurement.result == RESULT  # exactly what the agent computed
    assert measurement.server_metrics == {"kv_cache_usage_perc": {"max": 0.4}}


async def test_it_stores_a_message_sent_three_times_once(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    measurement = messages(run.id)[4]
    for _ in range(3):
        await socket.send_json_to(measurement)
        assert await socket.receive_json_from() == {"type": "ack", "seq": 4}
    await socket.disconnect()
    counts = await sync_to_async(
        lambda: (
            AgentMessageRecord.objects.filter(run=run).count(),
            Measurement.objects.filter(trial__run=run).count(),
        )
    )()
    assert counts == (1, 1)


async def test_it_rejects_bad_messages_and_stays_usable(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    await socket.send_to(text_data="{not json")
    assert (await socket.receive_json_from())["type"] == "rejected"
    broken = {**messages(run.id)[4], "result": {"completed": 1}}
    await socket.send_json_to(broken)
    reply = await socket.receive_json_from()
    assert reply["type"] == "rejected" and reply["seq"] == 4 and "result" in reply["reason"]
    foreign = {**messages(run.id)[0], "run_id": str(uuid.uuid4())}
    await socket.send_json_to(foreign)
    assert (await socket.receive_json_from())["reason"] == "message for another run"
    await socket.send_json_to(messages(run.id)[0])
    assert await socket.receive_json_from() == {"type": "ack", "seq": 0}
    await socket.disconnect()
    assert await sync_to_async(AgentMessageRecord.objects.filter(run=run).count)() == 1


async def test_an_array_frame_is_stored_and_answered_with_one_array_in_its_order(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    headers = [(b"authorization", f"Bearer {token}".encode())]
    socket = WebsocketCommunicator(
        application,
        f"/ws/agent/runs/{run.id}/",
        headers=headers,
        subprotocols=[protocol.BATCH_SUBPROTOCOL],
    )
    assert await socket.connect() == (True, protocol.BATCH_SUBPROTOCOL)
    whole_run = messages(run.id)
    broken = {**whole_run[4], "result": {"completed": 1}}  # refused in its place, alone
    await socket.send_json_to([*whole_run[:4], broken, whole_run[0]])
    replies = await socket.receive_json_from()
    assert [r["type"] for r in replies] == ["ack"] * 4 + ["rejected", "ack"]
    assert [r["seq"] for r in replies] == [0, 1, 2, 3, 4, 0]
    assert "result" in replies[4]["reason"]
    # The rest of the run in a second array; a lone message still gets a lone reply.
    await socket.send_json_to(whole_run[4:6])
    assert await socket.receive_json_from() == [
        {"type": "ack", "seq": 4},
        {"type": "ack", "seq": 5},
    ]
    await socket.send_json_to(whole_run[6])
    assert await socket.receive_json_from() == {"type": "ack", "seq": 6}
    # An array of more messages than a site must take is refused whole, without a seq.
    await socket.send_json_to([whole_run[0]] * (protocol.MAX_BATCH_MESSAGES + 1))
    too_many = await socket.receive_json_from()
    assert too_many["type"] == "rejected" and too_many["seq"] is None
    assert str(protocol.MAX_BATCH_MESSAGES) in too_many["reason"]
    await socket.disconnect()

    def stored():
        run.refresh_from_db()
        return run.state, AgentMessageRecord.objects.filter(run=run).count()

    assert await sync_to_async(stored)() == ("succeeded", 7)


async def test_without_the_subprotocol_an_array_is_one_bad_message(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    assert await socket.connect() == (True, None)  # what an agent of before arrays gets
    await socket.send_json_to(messages(run.id)[:2])
    reply = await socket.receive_json_from()
    assert reply["type"] == "rejected" and reply["seq"] is None
    await socket.disconnect()
    assert await sync_to_async(AgentMessageRecord.objects.filter(run=run).count)() == 0


async def test_it_refuses_a_token_of_another_run_like_a_missing_run(alice):
    run_a, token_a = await sync_to_async(_new_run)(alice.org)
    run_b, _ = await sync_to_async(_new_run)(alice.org)
    for run_id, token in [
        (run_b.id, token_a),
        (uuid.uuid4(), token_a),
        (run_a.id, None),
        (run_a.id, alice.token),
        (run_a.id, "bsr_forged"),
    ]:
        socket = await _agent_socket(run_id, token)
        assert await socket.connect() == (False, 4404)


async def test_it_refuses_messages_once_the_run_has_ended(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    await sync_to_async(Run.objects.filter(pk=run.pk).update)(state="cancelled")
    socket = await _agent_socket(run.id, token)
    assert await socket.connect() == (False, 4404)


async def test_it_finishes_the_run_only_when_every_message_has_arrived(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    sent = messages(run.id)
    for message in [sent[0], sent[1], sent[5], sent[6]]:  # 2, 3, 4 lost on the way
        await socket.send_json_to(message)
        await socket.receive_json_from()
    assert (await sync_to_async(Run.objects.get)(pk=run.pk)).state == "finalizing"
    for message in [sent[4], sent[2], sent[3]]:  # replayed after a reconnect, any order
        await socket.send_json_to(message)
        await socket.receive_json_from()
    await socket.disconnect()
    assert (await sync_to_async(Run.objects.get)(pk=run.pk)).state == "succeeded"


async def _browser(user, run_id) -> WebsocketCommunicator:
    from channels.auth import login  # noqa: F401 - session cookie below is what matters
    from django.test import Client

    client = Client()
    await sync_to_async(client.force_login)(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}"
    return WebsocketCommunicator(
        application,
        f"/ws/runs/{run_id}/",
        headers=[
            (b"cookie", cookie.encode()),
            (b"origin", b"http://127.0.0.1:8000"),
            (b"host", b"127.0.0.1:8000"),
        ],
    )


async def test_it_notifies_the_runs_watchers_as_messages_are_stored(alice, bob):
    run, token = await sync_to_async(_new_run)(alice.org)
    browser = await _browser(bob.user, run.id)  # a viewer may watch
    assert (await browser.connect())[0]
    agent = await _agent_socket(run.id, token)
    await agent.connect()
    await agent.send_json_to(messages(run.id)[4])
    await agent.receive_json_from()
    notice = await browser.receive_json_from(timeout=5)
    assert notice["kind"] == "measurement" and notice["trial"] == 0
    assert notice["level"] == {"concurrency": 8}
    # The figures the page charts, as they came (p50 and p99): the page draws from them.
    assert notice["result"] == {
        "completed": 100,
        "failed": 0,
        "p99_ttft_ms": 48.2,
        "median_itl_ms": 9.9,
        "output_throughput": 1024.0,
    }
    simulated = messages(run.id)[4] | {
        "seq": 5,
        "level": {"concurrency": 16},
        "result": RESULT | {"median_ttft_ms": 20.0, "simulated": {"speed": 3.0}},
    }
    await agent.send_json_to(simulated)
    await agent.receive_json_from()
    notice = await browser.receive_json_from(timeout=5)
    assert notice["result"]["median_ttft_ms"] == 20.0
    assert notice["result"]["simulated"] == {"speed": 3.0}  # labelled on the page at once
    await agent.disconnect()
    await browser.disconnect()


async def test_an_agent_hanging_up_on_its_ack_never_loses_the_browsers_notice(alice, monkeypatch):
    """The agent closes its socket the moment its last ack arrives (as every agent does at
    the end of a run); the notice of that message must already be on its way."""
    import asyncio

    from runs.consumers import sockets as consumers

    real_notify = consumers.anotify_run_watchers

    async def slow_notify(run_id, outcomes):
        await asyncio.sleep(0.3)  # a busy channel layer
        await real_notify(run_id, outcomes)

    monkeypatch.setattr(consumers, "anotify_run_watchers", slow_notify)
    run, token = await sync_to_async(_new_run)(alice.org)
    browser = await _browser(alice.user, run.id)
    assert (await browser.connect())[0]
    agent = await _agent_socket(run.id, token)
    await agent.connect()
    await agent.send_json_to(messages(run.id)[4])
    assert (await agent.receive_json_from(timeout=5))["type"] == "ack"
    await agent.disconnect()  # at once, like an agent whose run is over
    notice = await browser.receive_json_from(timeout=5)
    assert notice["kind"] == "measurement"
    await browser.disconnect()


async def test_it_closes_the_browser_socket_alike_for_foreign_and_missing_runs(alice, charlie):
    run, _ = await sync_to_async(_new_run)(alice.org)
    foreign = await _browser(charlie.user, run.id)
    missing = await _browser(charlie.user, uuid.uuid4())
    assert await foreign.connect() == await missing.connect() == (False, 4404)
    anonymous = WebsocketCommunicator(
        application, f"/ws/runs/{run.id}/", headers=[(b"origin", b"http://127.0.0.1:8000")]
    )
    assert await anonymous.connect() == (False, 4404)


def test_it_takes_a_batch_over_rest_when_the_socket_is_gone(alice):
    run, token = _new_run(alice.org)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    url = f"/api/v1/agent/runs/{run.id}/messages/"
    batch = messages(run.id)
    batch.insert(3, {"type": "measurement", "run_id": str(run.id), "seq": 99})  # malformed
    response = client.post(url, {"messages": batch + batch[:2]}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert body["acked"] == [0, 1, 2, 3, 4, 5, 6, 0, 1]
    assert [r["seq"] for r in body["rejected"]] == [99]
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert Measurement.objects.get(trial__run=run).result == RESULT


def test_it_keeps_run_tokens_and_user_tokens_apart(alice):
    run, token = _new_run(alice.org)
    other, _ = _new_run(alice.org)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert agent.get("/api/v1/orgs/acme/experiments/").status_code == 401
    assert (
        agent.post(
            f"/api/v1/agent/runs/{other.id}/messages/", {"messages": []}, format="json"
        ).status_code
        == 401
    )
    user = alice.client()
    assert (
        user.post(
            f"/api/v1/agent/runs/{run.id}/messages/", {"messages": []}, format="json"
        ).status_code
        == 401
    )


def test_it_gives_the_agent_its_job_with_a_deadline_within_budget(alice):
    from decimal import Decimal

    from django.utils import timezone

    from agents import protocol

    run, token = _new_run(alice.org)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get(f"/api/v1/agent/runs/{run.id}/job/")
    assert response.status_code == 200, response.content
    job = protocol.JobSpec.model_validate(response.json())  # exactly the shared shape
    assert job.run_id == run.id
    assert [t.serve_config for t in job.trials] == [{"max_num_seqs": 64}, {"max_num_seqs": 128}]
    assert job.engine.kind == "vllm" and job.engine.vllm_version == "0.11.0"
    assert job.report.ws_url == f"ws://testserver/ws/agent/runs/{run.id}/"
    # $50 cap at $3.99/GPU-hour: at most about 12.5 hours, and never past 2x the estimate.
    hours = (job.deadline - timezone.now()).total_seconds() / 3600
    assert 0 < hours <= float(Decimal(50) / Decimal("3.99")) + 0.01
    other, _ = _new_run(alice.org)
    assert client.get(f"/api/v1/agent/runs/{other.id}/job/").status_code == 401


async def _stored_counts(run) -> tuple[int, int, int]:
    return await sync_to_async(
        lambda: (
            AgentMessageRecord.objects.filter(run=run).count(),
            Trial.objects.filter(run=run).count(),
            Measurement.objects.filter(trial__run=run).count(),
        )
    )()


async def test_it_rejects_a_frame_nested_too_deep_and_stays_usable(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    for depth in (330, 100_000):
        await socket.send_to(text_data='{"seq": 3, "result": ' + "[" * depth + "]" * depth + "}")
        reply = await socket.receive_json_from()
        assert reply["type"] == "rejected" and reply["seq"] is None
        assert "nested deeper than 64" in reply["reason"]
    await socket.send_json_to(messages(run.id)[0])
    assert await socket.receive_json_from() == {"type": "ack", "seq": 0}
    await socket.disconnect()
    assert await _stored_counts(run) == (1, 0, 0)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"seq": 2**63}, "seq"),
        ({"seq": 2**200}, "seq"),
        ({"trial": 2**31}, "trial"),
        ({"level": {"concurrency": 2**31}}, "level.concurrency"),
        ({"result": RESULT | {"total_output_tokens": 10**30}}, "result.total_output_tokens"),
    ],
    ids=["seq 2**63", "seq 2**200", "trial", "concurrency", "token count"],
)
async def test_it_rejects_numbers_out_of_range_on_the_socket_and_stays_usable(
    alice, changes, field
):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    await socket.send_json_to(messages(run.id)[4] | changes)
    reply = await socket.receive_json_from()
    assert reply["type"] == "rejected" and reply["reason"].startswith(f"{field}: ")
    assert reply["seq"] == (None if field == "seq" else 4)  # never a seq it could not store
    await socket.send_json_to(messages(run.id)[4])
    assert await socket.receive_json_from() == {"type": "ack", "seq": 4}
    await socket.disconnect()
    assert await _stored_counts(run) == (1, 1, 1)


async def test_it_rejects_a_null_character_on_the_socket_like_the_rest_batch(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    await socket.send_json_to(messages(run.id)[1] | {"command": ["vllm", "serve", "m\x00"]})
    reply = await socket.receive_json_from()
    assert reply["type"] == "rejected" and reply["seq"] == 1 and "U+0000" in reply["reason"]
    await socket.send_json_to(messages(run.id)[1])
    assert await socket.receive_json_from() == {"type": "ack", "seq": 1}
    await socket.disconnect()
    assert await _stored_counts(run) == (1, 1, 0)


async def test_it_closes_the_socket_when_an_ingest_fails(alice, monkeypatch):
    """A write that fails (the database, a bug) must end the socket so the agent reconnects
    and resends; the close code must be one the ASGI server can send (1000, 3000-4999)."""
    from django.db import OperationalError

    from runs.consumers import sockets as consumers

    async def failing_ingest(**kwargs):
        raise OperationalError("the database went away")

    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    monkeypatch.setattr(consumers.AgentIngestConsumer, "_ingest", staticmethod(failing_ingest))
    await socket.send_json_to(messages(run.id)[0])
    closed = await socket.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_INTERNAL_ERROR}
    assert 3000 <= consumers.CLOSE_INTERNAL_ERROR <= 4999  # what Daphne lets an app send
    await socket.disconnect()
    assert await _stored_counts(run) == (0, 0, 0)
    monkeypatch.undo()
    again = await _agent_socket(run.id, token)  # the agent reconnects and resends
    await again.connect()
    await again.send_json_to(messages(run.id)[0])
    assert await again.receive_json_from() == {"type": "ack", "seq": 0}
    await again.disconnect()
    assert await _stored_counts(run) == (1, 0, 0)


def _agent_client(token) -> APIClient:
    client = APIClient()
    client.raise_request_exception = False  # a 500 is an answer to assert on
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_it_rejects_a_seq_out_of_range_in_a_rest_batch_and_stores_the_rest(alice):
    run, token = _new_run(alice.org)
    batch = messages(run.id)[:2]
    batch.insert(1, messages(run.id)[4] | {"seq": 2**63})
    response = _agent_client(token).post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200, response.content[:500]
    body = response.json()
    assert body["acked"] == [0, 1]
    (refusal,) = body["rejected"]
    assert refusal["index"] == 1 and refusal["seq"] is None
    assert refusal["reason"].startswith("seq: ")
    assert list(AgentMessageRecord.objects.filter(run=run).values_list("seq", flat=True)) == [0, 1]
    assert not Measurement.objects.filter(trial__run=run).exists()


def test_it_refuses_only_the_message_holding_a_null_character_in_a_rest_batch(alice):
    """As on the socket: one message with a U+0000 (a log tail with a stray byte) is refused
    on its own; the batch around it is stored, so it cannot hold back every later batch."""
    run, token = _new_run(alice.org)
    batch = messages(run.id)[:3]
    batch[1] = batch[1] | {"command": ["vllm", "serve", "m\x00"]}
    response = _agent_client(token).post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200, response.content[:500]
    body = response.json()
    assert body["acked"] == [0, 2]
    (refusal,) = body["rejected"]
    assert (refusal["index"], refusal["seq"]) == (1, 1) and "U+0000" in refusal["reason"]
    assert list(AgentMessageRecord.objects.filter(run=run).values_list("seq", flat=True)) == [0, 2]


def test_it_refuses_a_rest_batch_nested_too_deep_with_400(alice):
    run, token = _new_run(alice.org)
    body = '{"messages": [' + "[" * 330 + "]" * 330 + "]}"
    response = _agent_client(token).generic(
        "POST", f"/api/v1/agent/runs/{run.id}/messages/", body, content_type="application/json"
    )
    assert response.status_code == 400, response.content[:500]
    assert response.json()["error"]["code"] == "parse_error"
    assert not AgentMessageRecord.objects.filter(run=run).exists()


def test_it_takes_a_rest_batch_as_large_as_the_protocol_allows_whatever_the_limit(alice, settings):
    from agents import protocol

    # Far below one batch, for JSON bodies and for Django's own limit alike.
    settings.BENCHSITE_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64 * 1024
    run, token = _new_run(alice.org)
    # Trial ends with long log tails: as many as fit into the protocol's batch size.
    ended = {"type": "trial_finished", "run_id": str(run.id), "outcome": "failed"}
    tail = "e" * protocol.MAX_LOG_TAIL_CHARS
    count = protocol.MAX_BATCH_BYTES // (protocol.MAX_LOG_TAIL_CHARS + 200)
    batch = [ended | {"seq": n, "trial": n, "log_tail": tail} for n in range(count)]
    body = json.dumps({"messages": batch})
    assert settings.BENCHSITE_MAX_BODY_BYTES < len(body) <= protocol.MAX_BATCH_BYTES
    url = f"/api/v1/agent/runs/{run.id}/messages/"
    response = _agent_client(token).generic("POST", url, body, content_type="application/json")
    assert response.status_code == 200, response.content[:500]
    assert response.json()["acked"] == list(range(count))
    # Beyond the batch size (and its envelope) the body is refused as too large, unread.
    oversized = json.dumps({"messages": [], "padding": "p" * (protocol.MAX_BATCH_BYTES * 2)})
    response = _agent_client(token).generic("POST", url, oversized, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    assert AgentMessageRecord.objects.filter(run=run).count() == count


def test_it_keeps_the_weights_fetch_on_the_run_and_a_refusal_on_its_trial(alice):
    run, token = _new_run(alice.org)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    rid = str(run.id)
    batch = messages(run.id)[:3]  # hello, trial_started, an engine phase
    detail = {"repo": "org/m", "bytes": 16_000_000_000, "mb_per_s": 812.5, "cached": False}
    batch += [
        {"type": "cold_start_phase", "run_id": rid, "seq": 3, "trial": 0,
         "phase": "weights_downloaded", "seconds": 19.7, "detail": detail},
        {"type": "trial_finished", "run_id": rid, "seq": 4, "trial": 0, "outcome": "failed",
         "failure_class": "model_access_denied", "log_tail": "org/m is gated"},
    ]  # fmt: skip  # a table
    response = client.post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.json()["acked"] == [0, 1, 2, 3, 4]
    run.refresh_from_db()
    assert run.weights_fetch == {**detail, "seconds": 19.7}
    trial = Trial.objects.get(run=run)
    # The engine's phases stay times since its process started; the download is not one.
    assert trial.cold_start == {"weights_loaded": 31.5}
    assert (trial.outcome, trial.failure_class) == ("failed", "model_access_denied")


def test_it_keeps_each_engine_restart_once_and_the_run_page_shows_it(alice):
    run, token = _new_run(alice.org)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    rid = str(run.id)
    restart = {
        "type": "engine_restarted",
        "run_id": rid,
        "seq": 3,
        "trial": 0,
        "attempt": 1,
        "failure_class": "crash",
        "level": {"concurrency": 8},
        "requests_lost": 5,
        "log_tail": "killed by signal 9",
    }
    batch = [*messages(run.id)[:3], restart, restart]  # replayed: stored once
    response = client.post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.json()["acked"] == [0, 1, 2, 3, 3]
    trial = Trial.objects.get(run=run)
    assert trial.restarts == [
        {
            "attempt": 1,
            "failure_class": "crash",
            "level": {"concurrency": 8, "request_rate": None},
            "requests_lost": 5,
            "log_tail": "killed by signal 9",
        }
    ]
    page = signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode()
    assert "Engine died during c=8 and was started again (restart 1)" in page
    assert "5 requests before the crash are in no measurement" in page


def test_a_cuda_driver_mismatch_reaches_the_stored_trial_with_both_versions(alice):
    # The agent's messages for a CUDA 12.9 image on a 550 driver (tests/agents/
    # test_cuda_driver.py sends them from a fake driver): the failure class and the host's
    # versions are stored as sent.
    run, token = _new_run(alice.org)
    rid = str(run.id)
    problem = protocol.cuda_driver_problem(image_cuda="12.9", driver="550.54.15")
    batch = [
        {
            "type": "hello",
            "run_id": rid,
            "seq": 0,
            "agent_version": "0.1.0",
            "host": {
                "hostname": "pod-1",
                "driver_version": "550.54.15",
                "cuda_version": "12.4",
                "image_cuda_version": "12.9",
                "vllm_version": "0.11.0",
            },
        },
        {
            "type": "trial_started",
            "run_id": rid,
            "seq": 1,
            "trial": 0,
            "serve_config": {},
            "command": ["vllm", "serve", "m"],
        },
        {
            "type": "trial_finished",
            "run_id": rid,
            "seq": 2,
            "trial": 0,
            "outcome": "failed",
            "failure_class": protocol.CUDA_DRIVER_TOO_OLD,
            "log_tail": problem,
        },
    ]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.post(
        f"/api/v1/agent/runs/{rid}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200 and response.json()["rejected"] == []
    trial = Trial.objects.get(run=run, index=0)
    assert (trial.outcome, trial.failure_class) == ("failed", "cuda_driver_too_old")
    assert "CUDA 12.9" in trial.log_tail and "550.54.15" in trial.log_tail
    run.refresh_from_db()
    assert (run.agent_info["image_cuda_version"], run.agent_info["driver_version"]) == (
        "12.9",
        "550.54.15",
    )
