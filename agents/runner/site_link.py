"""The agent's two ways to the site — its WebSocket and the REST batch — and what the site
says back, reduced to what the outbox needs to decide: delivered, refused, cancelled, or
"try again later".

Guarantees:
- Every transport failure surfaces as ``LinkDown`` (retry later) or ``SiteRefused`` (the run
  token is not valid for this run: the socket closed with ``CloseCode.NOT_FOUND``, or HTTP
  401/403/404).
- Routes, close codes and the REST batch's request and answer are the protocol's
  (``agents.protocol.transport``), as the site's are.
- The run token is sent only in the ``Authorization`` header. It is never part of a repr, an
  exception message or a log line of this module (the WebSocket library's own debug log
  is redacted too).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import httpx
import pydantic
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as websocket_connect

from agents import protocol

logger = logging.getLogger(__name__)

REFUSING_HTTP_STATUSES = frozenset({401, 403, 404})
REST_TIMEOUT_SECONDS = 30.0
WS_OPEN_TIMEOUT_SECONDS = 10.0
# A site that does not finish the closing handshake is cut off after this; resending is safe.
WS_CLOSE_TIMEOUT_SECONDS = 2.0
REDACTED = "[run token]"


@dataclass(frozen=True)
class SiteEndpoints:
    """Where one run reports, and the run token that proves the agent may.

    ``rest_url`` is the API base (``…/api/v1/``); the batch goes to
    ``protocol.AGENT_MESSAGES_ROUTE`` under it. Either URL may be None."""

    run_id: str
    token: str = field(repr=False)
    ws_url: str | None
    rest_url: str | None

    @property
    def messages_url(self) -> str | None:
        if self.rest_url is None:
            return None
        return protocol.agent_route(
            self.rest_url, protocol.AGENT_MESSAGES_ROUTE, run_id=self.run_id
        )

    @property
    def epoch_url(self) -> str | None:
        if self.rest_url is None:
            return None
        return protocol.agent_route(self.rest_url, protocol.AGENT_EPOCH_ROUTE, run_id=self.run_id)

    def redact(self, text: str) -> str:
        """``text`` with the run token blanked out, for anything the outside world wrote
        (an exception, a reason) before it is logged or reported."""
        return text.replace(self.token, REDACTED) if self.token else text


class LinkDown(Exception):
    """The site could not be reached, or the connection was lost: retry later."""


class SiteRefused(Exception):
    """The site says this token is not valid for this run (or the run has ended): permanent."""


class Connection(Protocol):
    """One open socket to the site, text frames only. ``carries_arrays``: the site took
    ``protocol.BATCH_SUBPROTOCOL``, so a frame may hold many messages."""

    carries_arrays: bool

    async def send(self, text: str) -> None: ...

    async def recv(self) -> str: ...

    async def close(self) -> None: ...


Connector = Callable[[], Awaitable[Connection]]


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with full jitter: before retry ``attempt`` (0 first), wait a
    uniformly random time between 0 and ``min(maximum, initial * factor ** attempt)``."""

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0

    def delay(self, attempt: int) -> float:
        ceiling = self.maximum
        # factor ** attempt overflows for a long outage; past the cap it no longer matters.
        if attempt < 64:
            ceiling = min(self.maximum, self.initial * self.factor**attempt)
        return random.uniform(0, ceiling)  # noqa: S311 (jitter, not cryptography)


# ---------------------------------------------------------------------------------------------
# WebSocket
# ---------------------------------------------------------------------------------------------


class _RedactingLogger(logging.LoggerAdapter):
    """The WebSocket library logs request headers at debug level; this blanks the token."""

    def __init__(self, logger: logging.Logger, site: SiteEndpoints):
        super().__init__(logger, {})
        self._site = site

    def log(self, level, msg, *args, **kwargs):
        if not self.isEnabledFor(level):
            return
        text = str(msg) % args if args else str(msg)
        kwargs.setdefault("stacklevel", 2)
        self.logger.log(level, "%s", self._site.redact(text), **kwargs)


class _WebSocketConnection:
    def __init__(self, socket: ClientConnection):
        self._socket = socket
        self.carries_arrays = socket.subprotocol == protocol.BATCH_SUBPROTOCOL

    async def send(self, text: str) -> None:
        try:
            await self._socket.send(text)
        except websockets.ConnectionClosed as exc:
            raise _closed(exc) from None

    async def recv(self) -> str:
        try:
            frame = await self._socket.recv()
        except websockets.ConnectionClosed as exc:
            raise _closed(exc) from None
        return frame if isinstance(frame, str) else frame.decode("utf-8", "replace")

    async def close(self) -> None:
        await self._socket.close()


def _closed(exc: websockets.ConnectionClosed) -> Exception:
    code = exc.rcvd.code if exc.rcvd is not None else None
    if code == protocol.CloseCode.NOT_FOUND:
        return SiteRefused(f"the site closed the socket with {code}")
    return LinkDown(f"socket closed ({code if code is not None else 'no close frame'})")


def websocket_connector(site: SiteEndpoints) -> Connector:
    """Opens ``site.ws_url`` with the run token; the default ``Connector`` of the outbox."""
    if site.ws_url is None:
        raise ValueError("the site has no WebSocket URL")
    ws_url = site.ws_url
    library_logger = _RedactingLogger(logging.getLogger(f"{__name__}.websockets"), site)

    async def connect() -> Connection:
        try:
            socket = await websocket_connect(
                ws_url,
                additional_headers={"Authorization": f"Bearer {site.token}"},
                # A site that does not offer it answers without one: one message per frame.
                subprotocols=[protocol.BATCH_SUBPROTOCOL],
                open_timeout=WS_OPEN_TIMEOUT_SECONDS,
                close_timeout=WS_CLOSE_TIMEOUT_SECONDS,
                logger=library_logger,
            )
        except websockets.InvalidStatus as exc:
            # Daphne answers a socket closed before accept (NOT_FOUND) with HTTP 403.
            status = exc.response.status_code
            if status in REFUSING_HTTP_STATUSES:
                raise SiteRefused(f"the site refused the socket with HTTP {status}") from None
            raise LinkDown(f"the socket handshake got HTTP {status}") from None
        except websockets.ConnectionClosed as exc:
            raise _closed(exc) from None
        except (OSError, TimeoutError, websockets.WebSocketException) as exc:
            raise LinkDown(site.redact(f"cannot open the socket: {exc!r}")) from None
        return _WebSocketConnection(socket)

    return connect


# ---------------------------------------------------------------------------------------------
# What the site says
# ---------------------------------------------------------------------------------------------


def read_site_frames(text: str) -> list[protocol.SiteFrame]:
    """What one site → agent frame says: one ``protocol.SiteFrame``, or — the answer to an
    array frame — a JSON array of them, in order; each strictly validated. Raises
    ``ValueError`` for the whole frame otherwise."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError("not JSON") from exc
    try:
        if isinstance(data, list):
            return [protocol.parse_site_frame(item) for item in data]
        return [protocol.parse_site_frame(data)]
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        raise ValueError(f"bad frame ({exc.error_count()} error(s)): {first['msg']}") from None


async def rest_post_batch(
    client: httpx.AsyncClient, site: SiteEndpoints, batch: list[tuple[int, str]]
) -> protocol.BatchAnswer:
    """POSTs ``batch`` — ``(seq, message as JSON text)`` pairs, at most the site's batch
    limit — as a ``protocol.BatchRequest`` and reads the ``protocol.BatchAnswer``, where a
    refusal without a ``seq`` (the site could not read one) has the one sent at its index.

    Raises ``SiteRefused`` on 401/403/404 and ``LinkDown`` on everything else that is not a
    well-formed 2xx answer (5xx, timeouts, connection errors, a body that is not the answer)."""
    url = site.messages_url
    if url is None:
        raise ValueError("the site has no REST URL")
    try:
        response = await client.post(
            url,
            content=protocol.batch_request_body([text for _, text in batch]),
            headers={
                "Authorization": f"Bearer {site.token}",
                "Content-Type": "application/json",
            },
            timeout=REST_TIMEOUT_SECONDS,
        )
    except httpx.HTTPError as exc:
        raise LinkDown(site.redact(f"REST batch failed: {exc!r}")) from None
    if response.status_code in REFUSING_HTTP_STATUSES:
        raise SiteRefused(f"the site refused the REST batch with HTTP {response.status_code}")
    if not 200 <= response.status_code < 300:
        raise LinkDown(f"REST batch got HTTP {response.status_code}")
    try:
        answer = protocol.BatchAnswer.model_validate_json(response.content)
    except pydantic.ValidationError as exc:
        raise LinkDown(f"REST batch answer unreadable: {exc.error_count()} error(s)") from None
    return _with_sent_seqs(answer, [seq for seq, _ in batch])


async def rest_request_epoch(client: httpx.AsyncClient, site: SiteEndpoints) -> int:
    """Asks the site for a new epoch (``POST …/epoch/``) and returns it. Raises
    ``SiteRefused`` on 401/403/404 and ``LinkDown`` on anything else that is not a
    well-formed ``EpochGrant``. Each successful call issues another epoch."""
    url = site.epoch_url
    if url is None:
        raise ValueError("the site has no REST URL")
    try:
        response = await client.post(
            url, headers={"Authorization": f"Bearer {site.token}"}, timeout=REST_TIMEOUT_SECONDS
        )
    except httpx.HTTPError as exc:
        raise LinkDown(site.redact(f"epoch request failed: {exc!r}")) from None
    if response.status_code in REFUSING_HTTP_STATUSES:
        raise SiteRefused(f"the site refused the epoch request with HTTP {response.status_code}")
    if not 200 <= response.status_code < 300:
        raise LinkDown(f"epoch request got HTTP {response.status_code}")
    try:
        return protocol.EpochGrant.model_validate_json(response.content).epoch
    except pydantic.ValidationError:
        raise LinkDown("epoch answer unreadable") from None


def _with_sent_seqs(answer: protocol.BatchAnswer, seqs: list[int]) -> protocol.BatchAnswer:
    refusals = [
        refusal.model_copy(update={"seq": seqs[refusal.index]})
        if refusal.seq is None and refusal.index < len(seqs)
        else refusal
        for refusal in answer.rejected
    ]
    return answer.model_copy(update={"rejected": refusals})
