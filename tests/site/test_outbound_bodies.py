"""A receiver's answer is read to a limit (issue 32, finding 5): a server on 127.0.0.1 that
answers with a 50 MB body (generated as it is sent) costs the site no more than the limit
and one network read, whether it is a webhook, a Slack hook or an endpoint being checked.
The bytes are counted where they arrive, in this process's sockets, and where they leave,
in the server."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from runs.models import DeliveryStatus, Endpoint
from runs.services.endpoints import MODEL_LIST_MAX_BYTES
from runs.services.notifications.hooks import hook_create, hook_send_test

from .conftest import SYSTEM

BODY_BYTES = 50 * 1024 * 1024
CHUNK = 64 * 1024
# What the client may take in: the endpoint check's limit (the larger one), one read of the
# socket (64 KiB) beyond it, and the headers.
READ_AT_MOST = MODEL_LIST_MAX_BYTES + 64 * 1024 + 4 * 1024


class FloodingServer:
    """Answers every request 200 with ``BODY_BYTES`` of JSON-looking bytes; ``sent`` holds,
    per request, how many body bytes went out before the client hung up (or all of them)."""

    def __init__(self):
        self.sent: list[int] = []
        self.done = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(BODY_BYTES))
                self.end_headers()
                sent = 0
                try:
                    while sent < BODY_BYTES:
                        self.wfile.write(b" " * CHUNK)
                        sent += CHUNK
                except OSError:  # the client closed the connection
                    pass
                server.sent.append(sent)
                server.done.set()

            do_GET = do_POST = answer

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.http.server_address[1]
        threading.Thread(target=self.http.serve_forever, daemon=True).start()


@pytest.fixture
def flood(settings):
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    settings.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1"]
    running = FloodingServer()
    yield running
    running.http.shutdown()


@pytest.fixture
def received(monkeypatch):
    """Bytes this thread's sockets received (the server's thread is not counted)."""
    counted = [0]
    me = threading.get_ident()
    real_recv = socket.socket.recv

    def recv(sock, *args, **kwargs):
        data = real_recv(sock, *args, **kwargs)
        if threading.get_ident() == me:
            counted[0] += len(data)
        return data

    monkeypatch.setattr(socket.socket, "recv", recv)
    return counted


@pytest.mark.django_db
@pytest.mark.parametrize("kind", ["webhook", "slack"])
def test_a_hook_reads_no_more_than_the_limit_of_a_huge_answer(
    alice, flood, received, kind, django_capture_on_commit_callbacks
):
    hook = hook_create(
        org=alice.org,
        actor=SYSTEM,
        name="ci",
        kind=kind,
        events=["run.finished"],
        url=f"http://127.0.0.1:{flood.port}/hook",
    ).hook
    with django_capture_on_commit_callbacks(execute=True):
        delivery = hook_send_test(hook=hook, actor=SYSTEM)
    assert flood.done.wait(30)
    delivery.refresh_from_db()
    assert (delivery.status, delivery.last_status_code) == (DeliveryStatus.DELIVERED, 200)
    assert received[0] < READ_AT_MOST
    assert flood.sent[0] < BODY_BYTES  # the connection was closed, not drained


@pytest.mark.django_db
def test_the_endpoint_check_reads_no_more_than_its_limit_of_a_huge_answer(alice, flood, received):
    response = alice.client().post(
        f"/api/v1/orgs/{alice.org.slug}/endpoints/",
        {"name": "prod", "base_url": f"http://127.0.0.1:{flood.port}", "served_model_name": "fake"},
        format="json",
    )
    assert flood.done.wait(30)
    # The API's own answer is read by the test client in process, not from a socket.
    assert received[0] < READ_AT_MOST
    assert flood.sent[0] < BODY_BYTES
    assert response.status_code == 400, response.json()
    (message,) = response.json()["error"]["fields"]["base_url"]
    assert "model list" in message and "larger than" in message
    assert not Endpoint.objects.exists()
