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

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis]


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
