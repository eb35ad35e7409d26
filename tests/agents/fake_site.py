"""A stand-in for the site's agent endpoints, for outbox and runner tests without Django.

Guarantees:
- A real WebSocket server (``websockets``, its own thread and event loop) at
  ``/ws/agent/runs/<run id>/`` and a real HTTP server at
  ``/api/v1/agent/runs/<run id>/messages/`` (and ``…/epoch/``, which issues 1, 2, …), both
  on 127.0.0.1, on ports that stay the same across ``stop()`` and ``start()``.
- Like the real site: a wrong bearer token gets HTTP 403 on the socket handshake and 401 on
  REST; every message is validated with ``agents.protocol`` (so a ``"poison": true`` field,
  unknown to the protocol, is answered ``rejected``); a valid one is stored once per
  ``(epoch, seq)`` in ``ledger`` and acknowledged every time it arrives.
- ``files``: what ``GET …/evaluation-sets/<id>/`` serves (bytes by set id; 404 for any
  other id), with the run token only, as the real site's route does; ``downloads`` counts
  the files served.
- Bookkeeping for tests: ``receipts`` counts every arrival per seq (resends included),
  ``conflicts`` lists (epoch, seq) that arrived twice with different contents (a reused
  number), ``epochs_issued`` counts the epochs handed out,
  ``connections`` counts accepted sockets, ``rest_posts``/``max_batch`` the REST batches,
  ``array_frames``/``max_frame`` the array frames.
- ``arrays``: the site offers ``protocol.BATCH_SUBPROTOCOL`` and answers an array frame with
  an array (off by default: a site of before array frames, one message per frame).
- Faults on demand: ``cut_after`` closes every socket with 1011 (what the real site does when
  its ingest fails) after that many messages, leaving what the agent pipelined behind them
  unread; ``drop_after`` drops the next socket only, without a close frame, after that many
  messages (the kernel then discards the acks not yet sent, so the agent resends stored
  messages); ``refuse`` accepts and closes with 4404; ``rest_faults`` answers the next REST
  posts with the listed HTTP status (an int) or body (a str, sent with 200);
  ``push_cancel``/``push_raw`` send a frame on every open socket; ``rest_cancel`` adds a
  cancel to every REST answer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pydantic
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from agents import protocol
from agents.runner.outbox import SiteEndpoints

# The server's debug log shows request headers, the token included; the agent's own log is
# what the tests check for the token, so the stand-in stays quiet.
_server_log = logging.getLogger("tests.agents.fake_site.websockets")
_server_log.setLevel(logging.WARNING)


def free_port() -> int:
    """A port nobody listens on (for a site that is unreachable)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class FakeSite:
    def __init__(self, *, run_id: str, token: str):
        self.run_id = str(run_id)
        self.token = token
        self.changed = threading.Condition()
        self.ledger: dict[tuple[int, int], dict] = {}
        self.receipts: Counter[int] = Counter()
        self.conflicts: list[tuple[int, int]] = []
        self.epochs_issued = 0
        self.rejected: list[dict] = []
        self.connections = 0
        self.rest_posts = 0
        self.max_batch = 0
        self.cut_after: int | None = None
        self.drop_after: int | None = None
        self.refuse = False
        self.rest_faults: list[int | str] = []
        self.rest_cancel: str | None = None
        self.arrays = False
        self.array_frames = 0
        self.max_frame = 0
        self.files: dict[str, bytes] = {}
        self.downloads = 0

        self._loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._loop_thread.start()
        self._ws_server = None
        self._sockets: set[ServerConnection] = set()
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self.ws_port = 0
        self.rest_port = 0

    # -- addresses ---------------------------------------------------------------------------

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/ws/agent/runs/{self.run_id}/"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}/api/v1/"

    def endpoints(self, *, token: str | None = None, ws: bool = True, rest: bool = True):
        return SiteEndpoints(
            run_id=self.run_id,
            token=self.token if token is None else token,
            ws_url=self.ws_url if ws else None,
            rest_url=self.rest_url if rest else None,
        )

    # -- life --------------------------------------------------------------------------------

    def start(self) -> FakeSite:
        self._call(self._start_ws())
        self._http = ThreadingHTTPServer(("127.0.0.1", self.rest_port), _RestHandler)
        self._http.daemon_threads = True
        self._http.site = self  # type: ignore[attr-defined]
        self.rest_port = self._http.server_address[1]
        self._http_thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._http_thread.start()
        return self

    def stop(self) -> None:
        """The whole site goes down: open sockets are closed, nothing listens any more."""
        if self._ws_server is not None:
            self._call(self._stop_ws())
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def close(self) -> None:
        self.stop()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=5)

    async def _start_ws(self) -> None:
        self._ws_server = await serve(
            self._socket,
            "127.0.0.1",
            self.ws_port,
            process_request=self._handshake,
            select_subprotocol=self._subprotocol,
            logger=_server_log,
        )
        self.ws_port = self._ws_server.sockets[0].getsockname()[1]

    async def _stop_ws(self) -> None:
        self._ws_server.close()
        await self._ws_server.wait_closed()
        self._ws_server = None

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    # -- waiting -----------------------------------------------------------------------------

    def wait_for(self, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"the fake site waited {timeout} s in vain")
                self.changed.wait(left)

    def stored(self) -> list[int]:
        """The stored seqs, of every epoch."""
        with self.changed:
            return sorted(seq for _, seq in self.ledger)

    def issue_epoch(self) -> int:
        with self.changed:
            self.epochs_issued += 1
            self.changed.notify_all()
            return self.epochs_issued

    # -- the ledger ----------------------------------------------------------------------------

    def receive(self, message: object) -> dict:
        """Stores ``message`` once per seq; returns the answer (an ack or a rejection)."""
        seq = message.get("seq") if isinstance(message, dict) else None
        seq = seq if isinstance(seq, int) and seq >= 0 else None
        with self.changed:
            self.receipts[seq] += 1
            try:
                parsed = protocol.parse_agent_message(message)
            except pydantic.ValidationError as exc:
                errors = protocol.agent_message_errors(exc)
                reason = "; ".join(f"{e.field}: {e.message}" for e in errors)
                answer = {"type": "rejected", "seq": seq, "reason": reason}
            else:
                if str(parsed.run_id) != self.run_id:
                    answer = {"type": "rejected", "seq": seq, "reason": "message for another run"}
                else:
                    key = (parsed.epoch, seq)
                    if key in self.ledger and self.ledger[key] != message:
                        self.conflicts.append(key)
                    self.ledger.setdefault(key, message)
                    answer = {"type": "ack", "seq": seq}
            if answer["type"] == "rejected":
                self.rejected.append(answer)
            self.changed.notify_all()
        return answer

    # -- the socket ----------------------------------------------------------------------------

    def _handshake(self, connection: ServerConnection, request):
        if request.path != f"/ws/agent/runs/{self.run_id}/":
            return connection.respond(404, "Not Found\n")
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            # What Daphne answers when the consumer closes before accepting.
            return connection.respond(403, "Forbidden\n")
        return None

    def _subprotocol(self, connection: ServerConnection, offered) -> str | None:
        if self.arrays and protocol.BATCH_SUBPROTOCOL in offered:
            return protocol.BATCH_SUBPROTOCOL
        return None  # a site of before array frames

    async def _socket(self, websocket: ServerConnection) -> None:
        with self.changed:
            self.connections += 1
            self.changed.notify_all()
        if self.refuse:
            await websocket.close(4404, "no such run")
            return
        self._sockets.add(websocket)
        drop_after, self.drop_after = self.drop_after, None
        received = 0
        try:
            arrays = websocket.subprotocol == protocol.BATCH_SUBPROTOCOL
            async for text in websocket:
                try:
                    message = json.loads(text)
                except ValueError:
                    message = None
                if arrays and isinstance(message, list):
                    with self.changed:
                        self.array_frames += 1
                        self.max_frame = max(self.max_frame, len(message))
                    await websocket.send(json.dumps([self.receive(m) for m in message]))
                    received += len(message)
                else:
                    await websocket.send(json.dumps(self.receive(message)))
                    received += 1
                if drop_after is not None and received >= drop_after:
                    websocket.transport.close()  # no close frame; unread data is lost
                    return
                if self.cut_after is not None and received >= self.cut_after:
                    closing = asyncio.create_task(websocket.close(1011, "ingest failed"))
                    async for _ in websocket:
                        pass  # read (and lose) what was pipelined, up to the agent's close
                    await closing
                    return
        except ConnectionClosed:
            pass
        finally:
            self._sockets.discard(websocket)

    def push_cancel(self, reason: str) -> None:
        self.push_raw(json.dumps({"type": "cancel", "reason": reason}))

    def push_raw(self, text: str) -> None:
        async def send_all():
            for websocket in list(self._sockets):
                await websocket.send(text)

        self._call(send_all())


class _RestHandler(BaseHTTPRequestHandler):
    def do_GET(self):
        site: FakeSite = self.server.site  # type: ignore[attr-defined]
        base = f"/api/v1/agent/runs/{site.run_id}/evaluation-sets/"
        set_id = self.path.removeprefix(base).removesuffix("/")
        if not self.path.startswith(base) or set_id not in site.files:
            return self._answer(404, {"detail": "Not found."})
        if self.headers.get("Authorization") != f"Bearer {site.token}":
            return self._answer(401, {"detail": "Invalid run token for this run."})
        with site.changed:
            site.downloads += 1
        data = site.files[set_id]
        self.send_response(200)
        self.send_header("Content-Type", "application/jsonl")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        site: FakeSite = self.server.site  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        base = f"/api/v1/agent/runs/{site.run_id}/"
        if self.path not in (base + "messages/", base + "epoch/"):
            return self._answer(404, {"detail": "Not found."})
        if self.headers.get("Authorization") != f"Bearer {site.token}":
            return self._answer(401, {"detail": "Invalid run token for this run."})
        if self.path == base + "epoch/":
            return self._answer(200, {"epoch": site.issue_epoch()})
        with site.changed:
            site.rest_posts += 1
            fault = site.rest_faults.pop(0) if site.rest_faults else None
        if isinstance(fault, int):
            return self._answer(fault, {"detail": "fault"})
        if isinstance(fault, str):
            return self._answer(200, fault)
        messages = json.loads(body)["messages"]
        with site.changed:
            site.max_batch = max(site.max_batch, len(messages))
        acked, rejected = [], []
        for index, message in enumerate(messages):
            answer = site.receive(message)
            if answer["type"] == "ack":
                acked.append(answer["seq"])
            else:
                rejected.append({"index": index, "seq": answer["seq"], "reason": answer["reason"]})
        cancel = {"reason": site.rest_cancel} if site.rest_cancel is not None else None
        return self._answer(200, {"acked": acked, "rejected": rejected, "cancel": cancel})

    def _answer(self, status: int, body: object) -> None:
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format, *args):
        pass  # quiet: pytest shows stderr of failing tests
