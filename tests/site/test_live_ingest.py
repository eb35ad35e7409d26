"""The ingest path over a real ASGI server (Daphne in its own process) and the real
channels-redis layer: an agent's WebSocket in, a browser's WebSocket out."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets
from django.test import Client

from runs.models import Measurement, Run

from .live_server import daphne_server
from .test_agent_ingest import RESULT, _new_run, messages

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]


@pytest.fixture
def live_asgi(transactional_db):
    """Daphne serving the project's ASGI app on the test database (see live_server.py)."""
    with daphne_server() as address:
        yield address


def test_it_streams_a_run_through_a_real_server_to_a_browser(live_asgi, alice):
    run, token = _new_run(alice.org)
    web = Client()
    web.force_login(alice.user)
    cookie = f"sessionid={web.cookies['sessionid'].value}"
    sent = messages(run.id)

    async def scenario():
        browser = await websockets.connect(
            f"ws://{live_asgi}/ws/runs/{run.id}/",
            additional_headers={"Cookie": cookie},
            origin=f"http://{live_asgi}",
        )
        async with websockets.connect(
            f"ws://{live_asgi}/ws/agent/runs/{run.id}/",
            additional_headers={"Authorization": f"Bearer {token}"},
        ) as agent:
            acks = []
            for message in sent:
                await agent.send(json.dumps(message))
                acks.append(json.loads(await asyncio.wait_for(agent.recv(), 10)))
        notices = [json.loads(await asyncio.wait_for(browser.recv(), 10)) for _ in sent]
        await browser.close()
        return acks, notices

    acks, notices = asyncio.run(scenario())
    assert acks == [{"type": "ack", "seq": m["seq"]} for m in sent]
    assert [n["kind"] for n in notices] == [m["type"] for m in sent]
    run.refresh_from_db()
    assert run.state == "succeeded"
    assert Measurement.objects.get(trial__run=run).result == RESULT


def test_it_refuses_a_foreign_token_over_a_real_server(live_asgi, alice):
    run, _ = _new_run(alice.org)
    _other, other_token = _new_run(alice.org)

    async def attempt():
        with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
            await websockets.connect(
                f"ws://{live_asgi}/ws/agent/runs/{run.id}/",
                additional_headers={"Authorization": f"Bearer {other_token}"},
            )
        return refused.value.response.status_code

    assert asyncio.run(attempt()) == 403  # a socket closed before accept is an HTTP 403
    assert Run.objects.get(pk=run.pk).state == "queued"


def test_it_closes_the_agent_socket_for_real_when_an_ingest_fails(live_asgi, alice):
    """The database refuses a write (a trigger stands in for a failing database); the socket
    must then close, through Daphne, with a code the agent takes as "reconnect and resend",
    and the resend after the database is back is stored once."""
    from django.db import connection

    from runs.consumers.sockets import CLOSE_INTERNAL_ERROR
    from runs.models import AgentMessageRecord

    run, token = _new_run(alice.org)
    hello = messages(run.id)[0]
    url = f"ws://{live_asgi}/ws/agent/runs/{run.id}/"
    headers = {"Authorization": f"Bearer {token}"}

    async def send_until_closed():
        async with websockets.connect(url, additional_headers=headers) as agent:
            await agent.send(json.dumps(hello))
            with pytest.raises(websockets.ConnectionClosed) as closed:
                await asyncio.wait_for(agent.recv(), 10)
            return closed.value.rcvd.code if closed.value.rcvd else None

    async def send_and_ack():
        async with websockets.connect(url, additional_headers=headers) as agent:
            await agent.send(json.dumps(hello))
            return json.loads(await asyncio.wait_for(agent.recv(), 10))

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION h2a_refuse_write() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'injected: the database refuses the write'; END $$"
        )
        cursor.execute(
            "CREATE TRIGGER h2a_refuse_write BEFORE INSERT ON runs_agentmessagerecord "
            "FOR EACH ROW EXECUTE FUNCTION h2a_refuse_write()"
        )
    try:
        code = asyncio.run(send_until_closed())
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER h2a_refuse_write ON runs_agentmessagerecord")
            cursor.execute("DROP FUNCTION h2a_refuse_write()")
    assert code == CLOSE_INTERNAL_ERROR
    assert not AgentMessageRecord.objects.filter(run=run).exists()
    assert asyncio.run(send_and_ack()) == {"type": "ack", "seq": 0}
    assert AgentMessageRecord.objects.filter(run=run).count() == 1
