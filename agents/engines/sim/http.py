"""The simulator's HTTP/1.1 side: one connection's framing, its routes and its answers.

Guarantees: requests on a keep-alive connection are answered in order, one at a time; every
response carries ``X-Benchsite-Simulated: 1``; ``/health``, ``/metrics``, ``/v1/models``,
``/version``, ``/v1/completions`` and ``/v1/chat/completions`` are served, anything else is
404 (405 for a completion that is not a POST).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from agents.engines.sim.completions import (
    SIM_VERSION,
    WORDS,
    BadRequest,
    Client,
    StreamTemplate,
    completion_body,
    dumps,
    read_request,
    stream_chunks,
    stream_template,
)
from agents.engines.sim.metrics import metrics_text

if TYPE_CHECKING:
    from agents.engines.sim.scheduler import SimRequest
    from agents.engines.sim.server import SimServer

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; requests are answered in order, one at a time."""

    def __init__(self, server: SimServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self._template: StreamTemplate | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while not self.busy and not self.closed:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
                method, target, _version = head[0].split(" ", 2)
            except ValueError:
                self._respond(400, {"error": {"message": "malformed request"}}, close=True)
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.keep_alive = headers.get("connection", "").lower() != "close"
            self._route(method, urlsplit(target).path, body)

    # -- responses -------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def _respond(self, status: int, payload: object, *, close: bool = False, raw=None) -> None:
        body = raw if raw is not None else dumps(payload)
        kind = "text/plain; version=0.0.4" if raw is not None else "application/json"
        self._write(
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(body)}\r\nX-Benchsite-Simulated: 1\r\n\r\n".encode()
            + body
        )
        if close or not self.keep_alive:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def _error(self, status: int, message: str) -> None:
        kind = "BadRequestError" if status == 400 else "NotFoundError"
        self._respond(status, {"error": {"message": message, "type": kind, "code": status}})

    def _route(self, method: str, path: str, body: bytes) -> None:
        server = self.server
        if path == "/health":
            self._respond(200, None, raw=b"")
        elif path == "/metrics":
            self._respond(200, None, raw=metrics_text(server))
        elif path == "/v1/models":
            self._respond(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": server.name,
                            "object": "model",
                            "created": int(time.time()),
                            "owned_by": "benchsite-simulator",
                            "root": server.model.name,
                            "max_model_len": server.settings.max_model_len,
                            "simulated": True,
                        }
                    ],
                },
            )
        elif path == "/version":
            # The speed, for a client that reports in the modelled GPU's time (bench).
            self._respond(200, {"version": SIM_VERSION, "simulated": True, "speed": server.speed})
        elif path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                self._error(405, "use POST")
                return
            self._generate(body, chat=path.endswith("chat/completions"))
        else:
            self._error(404, f"no route {path}")

    def _generate(self, body: bytes, *, chat: bool) -> None:
        server = self.server
        try:
            request = read_request(
                body,
                chat=chat,
                served_model_name=server.name,
                max_model_len=server.settings.max_model_len,
            )
        except BadRequest as exc:
            self._error(exc.status, exc.message)
            return
        seq = next(server.ids)
        prefix = "chatcmpl" if chat else "cmpl"
        client = Client(
            self,
            seq,
            server.name,
            chat,
            request.stream,
            request.include_usage,
            random.Random(server.seed * 1_000_003 + seq),  # noqa: S311 - text, not secrets
        )
        self.response_id = f"{prefix}-sim{seq:08d}"
        self.text_parts: list[str] = []
        self.busy = True
        if request.stream:
            self._write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nX-Benchsite-Simulated: 1\r\n\r\n"
            )
        server.submit(client, request.words, request.max_tokens)

    def on_token(
        self, client: Client, request: SimRequest, words: tuple[int, ...], done: bool
    ) -> None:
        if client.stream:
            first = not client.started
            client.started = True
            if first or self._template is None:
                self._template = stream_template(self.response_id, client)
            self._write(stream_chunks(self._template, client, request, words, done, first))
        else:
            self.text_parts.extend(" " + WORDS[word] for word in words)
            if done:
                text = "".join(self.text_parts)
                self._respond(200, completion_body(self.response_id, client, request, text))
        if done:
            self.busy = False
            if not self.keep_alive:
                self.closed = True
                if self.transport is not None:
                    self.transport.close()
            elif self.buffer:
                self._next()
