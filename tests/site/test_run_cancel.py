"""Cancelling a run (issue 5, site side): the user API, the agent's socket and REST batch,
and the agent's download of the dataset its run's workload names."""

from __future__ import annotations

import json
import uuid

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from rest_framework.test import APIClient

from benchsite.asgi import application
from runs.models import AuditEvent, ModelSpec, Run
from runs.services.experiments import dataset_upload
from runs.services.run_tokens import run_token_issue

from .conftest import SYSTEM, frozen, make_experiment, make_model
from .db_state import database_state

SHAREGPT = [
    {"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello!"}]},
    {"conversations": [{"from": "human", "value": "2+2?"}, {"from": "gpt", "value": "4"}]},
]
NOT_FOUND = {"error": {"status": 404, "code": "not_found", "message": "Not found."}}


@pytest.fixture
async def close_consumer_connections():
    """Consumers reach the database from asgiref's worker thread, which keeps its own
    connection; close it so the test database can be dropped at the end."""
    yield
    await database_sync_to_async(connections.close_all)()


def _new_run(org, state: str = "queued", **experiment) -> tuple[Run, str]:
    model = ModelSpec.objects.filter(organization=org).first() or make_model(org)
    name = f"e-{uuid.uuid4()}"
    started = make_experiment(org, model=model, name=name, **experiment)
    run = Run.objects.create(organization=org, experiment=started, state=state, **frozen(started))
    return run, run_token_issue(run=run)


def _cancel_url(run, org: str = "acme") -> str:
    return f"/api/v1/orgs/{org}/runs/{run.id}/cancel/"


def _agent(token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


async def _agent_socket(run_id, token) -> WebsocketCommunicator:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    return WebsocketCommunicator(application, f"/ws/agent/runs/{run_id}/", headers=headers)


def _cancel_events(org) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(organization=org, event="run.cancel").order_by("seq"))


def _finished(run_id, seq: int) -> dict:
    return {
        "type": "run_finished",
        "run_id": str(run_id),
        "seq": seq,
        "outcome": "cancelled",
        "reason": "cancelled on request",
    }


# ------------------------------------------------------------------------------------------
# The user API
# ------------------------------------------------------------------------------------------


def test_it_cancels_a_queued_run_at_once(alice, mallory):
    run, token = _new_run(alice.org)
    response = mallory.client().post(_cancel_url(run), {"reason": "  wrong grid  "}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "cancelled" and body["cancel_reason"] == "wrong grid"
    assert body["cancel_requested_at"] is not None and body["finished_at"] is not None
    run.refresh_from_db()
    assert (run.state, run.failure_reason, run.cancel_reason) == (
        "cancelled",
        "wrong grid",
        "wrong grid",
    )
    [event] = _cancel_events(alice.org)
    assert event.actor == mallory.user and event.target_id == str(run.id)
    assert event.before["state"] == "queued" and event.after["state"] == "cancelled"
    assert event.after["cancel_reason"] == "wrong grid"
    # Nothing was rented for it, and its token died with it.
    assert _agent(token).get(f"/api/v1/agent/runs/{run.id}/job/").status_code == 401


def test_it_takes_a_cancel_without_a_body(alice):
    run, _ = _new_run(alice.org)
    response = alice.client().post(_cancel_url(run))
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "cancelled" and response.json()["cancel_reason"] == ""


@pytest.mark.parametrize("state", ["provisioning", "starting", "benchmarking", "finalizing"])
def test_it_asks_a_started_runs_agent_to_stop(alice, state):
    run, _ = _new_run(alice.org, state=state)
    response = alice.client().post(_cancel_url(run), {"reason": "too slow"}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == state and body["finished_at"] is None  # the agent ends it
    assert body["cancel_requested_at"] is not None and body["cancel_reason"] == "too slow"
    [event] = _cancel_events(alice.org)
    assert set(event.after) == {"cancel_requested_at", "cancel_reason"}


def test_it_keeps_the_first_request_when_asked_twice(alice, mallory):
    run, _ = _new_run(alice.org, state="benchmarking")
    first = mallory.client().post(_cancel_url(run), {"reason": "first"}, format="json").json()
    again = alice.client().post(_cancel_url(run), {"reason": "second"}, format="json")
    assert again.status_code == 200
    assert again.json()["cancel_requested_at"] == first["cancel_requested_at"]
    assert again.json()["cancel_reason"] == "first"
    assert len(_cancel_events(alice.org)) == 1


@pytest.mark.parametrize("state", ["succeeded", "failed", "cancelled", "over_budget"])
def test_it_refuses_to_cancel_an_ended_run(alice, state):
    run, _ = _new_run(alice.org, state=state)
    before = database_state()
    response = alice.client().post(_cancel_url(run), {"reason": "late"}, format="json")
    assert response.status_code == 409, response.content
    assert response.json()["error"] == {
        "status": 409,
        "code": "conflict",
        "message": f"Run {run.id} has already ended ({state}).",
    }
    assert database_state() == before


def test_it_lets_viewers_only_watch(alice, bob):
    run, _ = _new_run(alice.org, state="benchmarking")
    before = database_state()
    response = bob.client().post(_cancel_url(run), {"reason": "mine now"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert database_state() == before


def test_it_hides_other_tenants_runs(alice, charlie):
    run, _ = _new_run(alice.org, state="benchmarking")
    client = charlie.client()
    before = database_state()
    for url in (_cancel_url(run, "globex"), _cancel_url(run, "acme")):
        response = client.post(url, {"reason": "sabotage"}, format="json")
        assert response.status_code == 404 and response.json() == NOT_FOUND
    missing = client.post(
        f"/api/v1/orgs/globex/runs/{uuid.uuid4()}/cancel/", {"reason": "x"}, format="json"
    )
    assert missing.status_code == 404 and missing.json() == NOT_FOUND
    assert database_state() == before


@pytest.mark.parametrize(
    "payload",
    [
        {"reason": "x" * 501},
        {"reason": ["stop"]},
        {"reason": 5},
        {"reason": True},
        {"reason": {"text": "stop"}},
        {"reason": None},
    ],
    ids=["too long", "list", "number", "bool", "object", "null"],
)
def test_it_refuses_a_bad_reason_naming_it(alice, payload):
    run, _ = _new_run(alice.org, state="benchmarking")
    before = database_state()
    response = alice.client().post(_cancel_url(run), payload, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid" and list(error["fields"]) == ["reason"]
    assert database_state() == before


def test_it_keeps_the_request_when_the_channel_layer_fails(
    alice, monkeypatch, django_capture_on_commit_callbacks
):
    class BrokenLayer:
        async def group_send(self, group, message):
            raise ConnectionError("redis is down")

    monkeypatch.setattr("runs.consumers.notices.get_channel_layer", BrokenLayer)
    run, _ = _new_run(alice.org, state="benchmarking")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = alice.client().post(_cancel_url(run), {"reason": "stop"}, format="json")
    assert len(callbacks) == 1  # the notice was attempted, and its failure swallowed
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.cancel_requested_at is not None


# ------------------------------------------------------------------------------------------
# The agent hears of it: on its socket, on connecting, in every REST batch answer
# ------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_it_tells_a_connected_agent_at_once(alice, close_consumer_connections):
    run, token = await sync_to_async(_new_run)(alice.org, state="benchmarking")
    socket = await _agent_socket(run.id, token)
    assert (await socket.connect())[0]
    assert await socket.receive_nothing(timeout=0.2)  # no cancel before it is asked
    response = await sync_to_async(alice.client().post)(
        _cancel_url(run), {"reason": "wrong grid"}, format="json"
    )
    assert response.status_code == 200
    assert await socket.receive_json_from(timeout=5) == {"type": "cancel", "reason": "wrong grid"}
    # The agent stops and says so: that, not the request, ends the run.
    await socket.send_json_to(_finished(run.id, 0))
    assert await socket.receive_json_from(timeout=5) == {"type": "ack", "seq": 0}
    await socket.disconnect()
    run = await sync_to_async(Run.objects.get)(pk=run.pk)
    assert run.state == "cancelled" and run.finished_at is not None
    assert run.failure_reason == "cancelled on request"


@pytest.mark.django_db(transaction=True)
async def test_it_tells_an_agent_that_connects_after_the_request(alice, close_consumer_connections):
    run, token = await sync_to_async(_new_run)(alice.org, state="provisioning")
    response = await sync_to_async(alice.client().post)(
        _cancel_url(run), {"reason": "budget"}, format="json"
    )
    assert response.status_code == 200
    socket = await _agent_socket(run.id, token)
    assert (await socket.connect())[0]
    assert await socket.receive_json_from(timeout=5) == {"type": "cancel", "reason": "budget"}
    await socket.disconnect()


def test_it_answers_rest_batches_with_the_cancel_request(alice):
    run, token = _new_run(alice.org, state="benchmarking")
    agent = _agent(token)
    url = f"/api/v1/agent/runs/{run.id}/messages/"
    heartbeat = {"type": "heartbeat", "run_id": str(run.id), "seq": 0}
    before = agent.post(url, {"messages": [heartbeat]}, format="json").json()
    assert before == {"acked": [0], "rejected": [], "cancel": None}
    cancelled = alice.client().post(_cancel_url(run), {"reason": "stop"}, format="json")
    assert cancelled.status_code == 200
    after = agent.post(url, {"messages": [{**heartbeat, "seq": 1}]}, format="json").json()
    # The cancel is the protocol's Cancel, as on the socket (agents read only its reason).
    cancel = {"type": "cancel", "reason": "stop"}
    assert after == {"acked": [1], "rejected": [], "cancel": cancel}
    finished = agent.post(url, {"messages": [_finished(run.id, 2)]}, format="json").json()
    assert finished["acked"] == [2]
    run.refresh_from_db()
    assert run.state == "cancelled"


# ------------------------------------------------------------------------------------------
# The dataset of the run's workload, for its agent only
# ------------------------------------------------------------------------------------------


def _upload(org, name="chats", conversations=SHAREGPT):
    return dataset_upload(org=org, actor=SYSTEM, name=name, raw=json.dumps(conversations).encode())


def _sharegpt_workload(dataset) -> dict:
    return {
        "dataset": {"kind": "sharegpt", "dataset_id": str(dataset.id)},
        "concurrency": [1, 8],
        "requests_per_level": 10,
    }


def _dataset_url(run, dataset_id) -> str:
    return f"/api/v1/agent/runs/{run.id}/datasets/{dataset_id}/"


def _content(response) -> bytes:
    return b"".join(response.streaming_content)


def test_it_serves_the_runs_dataset_to_its_agent(alice):
    dataset = _upload(alice.org)
    run, token = _new_run(alice.org, workload=_sharegpt_workload(dataset))
    response = _agent(token).get(_dataset_url(run, dataset.id))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert _content(response) == json.dumps(SHAREGPT).encode()  # exactly as uploaded


def test_it_serves_no_other_dataset(alice):
    named = _upload(alice.org)
    other = _upload(alice.org, name="other", conversations=SHAREGPT[:1])
    run, token = _new_run(alice.org, workload=_sharegpt_workload(named))
    agent = _agent(token)
    unreferenced = agent.get(_dataset_url(run, other.id))
    missing = agent.get(_dataset_url(run, uuid.uuid4()))
    assert unreferenced.status_code == missing.status_code == 404
    assert unreferenced.json() == missing.json() == NOT_FOUND


def test_it_serves_a_dataset_only_to_the_run_that_names_it(alice):
    dataset = _upload(alice.org)
    run, _ = _new_run(alice.org, workload=_sharegpt_workload(dataset))
    other_run, other_token = _new_run(alice.org)  # a random-prompt workload
    # The other run's agent, on its own run: that run does not name the dataset.
    response = _agent(other_token).get(_dataset_url(other_run, dataset.id))
    assert response.status_code == 404 and response.json() == NOT_FOUND
    # On this run's URL its token is not valid at all, like every agent endpoint.
    assert _agent(other_token).get(_dataset_url(run, dataset.id)).status_code == 401


def test_it_serves_datasets_to_run_tokens_only(alice):
    dataset = _upload(alice.org)
    run, _ = _new_run(alice.org, workload=_sharegpt_workload(dataset))
    response = alice.client().get(_dataset_url(run, dataset.id))
    assert response.status_code == 401
    assert response.json()["error"]["status"] == 401
    assert APIClient().get(_dataset_url(run, dataset.id)).status_code == 401


def test_it_hides_other_tenants_datasets_even_when_a_workload_names_one(alice, charlie):
    foreign = _upload(charlie.org)
    run, token = _new_run(alice.org)
    # Validation refuses a foreign dataset; write one in behind its back.
    type(run.experiment).objects.filter(pk=run.experiment_id).update(
        workload=_sharegpt_workload(foreign)
    )
    response = _agent(token).get(_dataset_url(run, foreign.id))
    assert response.status_code == 404 and response.json() == NOT_FOUND


def test_it_stops_serving_the_dataset_when_the_run_has_ended(alice):
    dataset = _upload(alice.org)
    run, token = _new_run(alice.org, workload=_sharegpt_workload(dataset))
    assert alice.client().post(_cancel_url(run)).status_code == 200
    assert _agent(token).get(_dataset_url(run, dataset.id)).status_code == 401
