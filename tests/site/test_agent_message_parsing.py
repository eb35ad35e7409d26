"""One parse-or-refuse rule for agent messages (issue 15): the ingest socket and the REST
batch give the same answer for the same bad message, and the agent's routes are the ones
the site serves."""

from __future__ import annotations

import json
import uuid
from urllib.parse import urlparse

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import connections
from django.urls import resolve

from agents import protocol
from agents.runner.site_link import SiteEndpoints
from runs.api.views_agent import AgentEpochView, AgentMessagesView
from runs.inputs.nul_characters import NUL_REFUSAL
from runs.models import AgentMessageRecord
from runs.services.agent_messages import agent_frame_parse

from .test_agent_ingest import _agent_client, _agent_socket, _new_run, messages

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def close_consumer_connections():
    yield
    await database_sync_to_async(connections.close_all)()


def _bad_messages(run_id) -> dict[str, object]:
    """Bad messages by what is wrong with them."""
    hello, started = messages(run_id)[0], messages(run_id)[1]
    return {
        "not an object": 5,
        "no type": {"run_id": str(run_id), "seq": 3},
        "an unknown type": hello | {"type": "bogus"},
        "a wrong field type": started | {"trial": "0"},
        "an unknown field": hello | {"bogus": 1},
        "a seq out of range": hello | {"seq": 2**63},
        "another run": hello | {"run_id": str(uuid.uuid4())},
        "a null character": started | {"command": ["vllm", "serve", "m\x00"]},
    }


@pytest.mark.parametrize("case", list(_bad_messages(uuid.uuid4())))
async def test_it_refuses_a_bad_message_alike_on_the_socket_and_in_a_rest_batch(alice, case):
    run, token = await sync_to_async(_new_run)(alice.org)
    bad = _bad_messages(run.id)[case]
    socket = await _agent_socket(run.id, token)
    await socket.connect()
    await socket.send_json_to(bad)
    on_socket = protocol.Rejected.model_validate(await socket.receive_json_from())
    await socket.disconnect()

    url = protocol.agent_route("/api/v1/", protocol.AGENT_MESSAGES_ROUTE, run_id=run.id)
    response = await sync_to_async(_agent_client(token).post)(
        url, {"messages": [bad]}, format="json"
    )
    assert response.status_code == 200, response.content[:500]
    answer = protocol.BatchAnswer.model_validate_json(response.content)
    assert answer.acked == []
    (in_batch,) = answer.rejected
    assert (in_batch.seq, in_batch.reason) == (on_socket.seq, on_socket.reason)
    assert in_batch.index == 0
    assert not await sync_to_async(AgentMessageRecord.objects.filter(run=run).exists)()


def test_it_refuses_a_batch_over_the_protocols_limit_naming_the_field(alice):
    run, token = _new_run(alice.org)
    batch = [messages(run.id)[0]] * (protocol.MAX_BATCH_MESSAGES + 1)
    url = protocol.agent_route("/api/v1/", protocol.AGENT_MESSAGES_ROUTE, run_id=run.id)
    response = _agent_client(token).post(url, {"messages": batch}, format="json")
    assert response.status_code == 400
    assert "messages" in response.json()["error"]["fields"]
    assert not AgentMessageRecord.objects.filter(run=run).exists()


def test_the_sockets_close_with_the_protocols_codes_as_plain_integers():
    from runs.consumers import sockets as consumers

    assert consumers.CLOSE_NOT_FOUND == protocol.CloseCode.NOT_FOUND
    assert consumers.CLOSE_INTERNAL_ERROR == protocol.CloseCode.INTERNAL_ERROR
    # Daphne (autobahn) refuses a close code whose type is not exactly int (an IntEnum).
    assert type(consumers.CLOSE_NOT_FOUND) is type(consumers.CLOSE_INTERNAL_ERROR) is int


def test_the_agents_routes_are_the_ones_the_site_serves():
    run_id = str(uuid.uuid4())
    site = SiteEndpoints(
        run_id=run_id, token="t", ws_url=None, rest_url="https://site.example/api/v1/"
    )
    for url, view in ((site.messages_url, AgentMessagesView), (site.epoch_url, AgentEpochView)):
        match = resolve(urlparse(url).path)
        assert match.func.view_class is view
        assert str(match.kwargs["run_id"]) == run_id


@pytest.mark.parametrize(
    ("command", "encoding", "refused"),
    [
        ("m\x00", None, True),  # written by JSON as the escape \u0000
        ("m\x00", "utf-16", True),  # bytes: the decoded message is walked
        ({"a\x00": 1}, None, True),  # in a key
        ("m\\u0000", None, False),  # a backslash and 'u0000': no U+0000 in it
    ],
    ids=["escaped", "utf-16-bytes", "in-a-key", "a-literal-backslash"],
)
def test_a_frame_is_refused_for_a_null_character_only_when_it_holds_one(command, encoding, refused):
    run_id = uuid.uuid4()
    started = messages(run_id)[1]
    if isinstance(command, dict):
        frame = json.dumps(started | {"serve_config": command})
    else:
        frame = json.dumps(started | {"command": ["vllm", "serve", command]})
    parsed = agent_frame_parse(frame.encode(encoding) if encoding else frame, run_id=run_id)
    if refused:
        assert isinstance(parsed, protocol.Rejected) and parsed.reason == NUL_REFUSAL
    else:
        assert parsed.command == ["vllm", "serve", "m\\u0000"]
