"""WebSocket consumers: the agent's ingest socket and the browser's live socket (what
they pass on, and the groups they listen in: ``runs.consumers.notices``).

Both close with the same code (``CloseCode.NOT_FOUND``) for "no such run" and "not yours",
so a socket tells a stranger nothing. The browser socket only notifies; the REST API stays
the source of truth.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.http import Http404

from agents import protocol
from runs.access import Principal, access_run_of_user
from runs.consumers.notices import agent_run_group, anotify_run_watchers, run_group
from runs.services.agent_messages import Parsed, agent_frame_parse
from runs.services.ingest import agent_messages_ingest
from runs.services.run_control import run_stop_request
from runs.services.run_tokens import unscoped_run_for_token

logger = logging.getLogger(__name__)

# Daphne (autobahn) closes only with a code whose type is exactly int, and raises on an
# IntEnum: the sockets close with the protocol's codes' values.
CLOSE_NOT_FOUND = protocol.CloseCode.NOT_FOUND.value
CLOSE_INTERNAL_ERROR = protocol.CloseCode.INTERNAL_ERROR.value
# Messages that arrived while the previous batch was being written go in one transaction
# (whole frames: one array frame may hold more).
MAX_WRITE_BATCH = 500


@dataclass(frozen=True)
class _Frame:
    """One frame's messages, each parsed or refused, and whether it came as an array (then
    it is answered with one array of replies, in its order)."""

    parsed: list[Parsed]
    array: bool

    @property
    def messages(self) -> list[protocol.AgentMessage]:
        return [p for p in self.parsed if not isinstance(p, protocol.Rejected)]


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            parts = value.decode("latin-1").split()
            if len(parts) == 2 and parts[0].lower() == "bearer":
                return parts[1]
    return None


class AgentIngestConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/agent/runs/<run id>/``: authenticated by that run's token. Every valid message is
    stored once and acknowledged with its ``seq`` after it is committed; an invalid one is
    answered ``rejected`` with a reason, and the socket stays open for the next.

    Messages are validated as they arrive and written by one task per socket, which takes
    everything that queued up while it wrote the previous batch: a pipelining agent gets one
    commit per batch instead of one per message. A message still queued when the socket
    drops was never acknowledged, so the agent resends it. An agent that opened the socket
    with ``protocol.BATCH_SUBPROTOCOL`` may send many messages in one frame, a JSON array;
    the array is answered with one frame, the array of each message's ack or refusal in its
    order.

    A cancel request reaches the agent as ``cancel``: at once when its socket is open, and
    right after connecting when it was made while no socket was."""

    async def connect(self):
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        self.run = await database_sync_to_async(unscoped_run_for_token)(
            run_id=run_id, raw=_bearer(self.scope), delivering=True
        )
        if self.run is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.pending: asyncio.Queue[_Frame] = asyncio.Queue()
        self.writer = asyncio.create_task(self._write_batches())
        # An agent that asks for it may send many messages per frame (protocol.transport).
        self.arrays = protocol.BATCH_SUBPROTOCOL in self.scope.get("subprotocols", ())
        await self.accept(subprotocol=protocol.BATCH_SUBPROTOCOL if self.arrays else None)
        self.agent_group = agent_run_group(self.run.id)
        await self.channel_layer.group_add(self.agent_group, self.channel_name)
        # Read again after joining: a request committed before the join is seen here, one
        # committed after it arrives as agent.cancel (both at worst: a second cancel is harmless).
        await database_sync_to_async(self.run.refresh_from_db)(
            fields=["cancel_requested_at", "cancel_reason"]
        )
        stop = run_stop_request(self.run)  # a cancel, or an ended run still delivering
        if stop is not None:
            await self._send_cancel(stop)

    async def disconnect(self, code):
        writer = getattr(self, "writer", None)
        if writer is not None:
            writer.cancel()
        if hasattr(self, "agent_group"):
            await self.channel_layer.group_discard(self.agent_group, self.channel_name)

    async def agent_cancel(self, event):
        """A cancel request for this run, from ``runs.services.run_control``."""
        await self._send_cancel(event.get("reason", ""))

    async def _send_cancel(self, reason: str) -> None:
        logger.info("run %s: telling the agent to cancel", self.run.id)
        await self.send_json(protocol.Cancel(reason=reason).model_dump())

    async def dispatch(self, message):
        # A frame is only parsed and queued here; the writer's database calls close stale
        # connections in their own threads. Channels' dispatch would first hop through the
        # process's one thread-sensitive thread for every frame to close them, so every
        # socket's frames would wait on that one thread in turn.
        if message["type"] == "websocket.receive":
            await self.websocket_receive(message)
        else:
            await super().dispatch(message)

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        parsed = agent_frame_parse(
            text_data if text_data is not None else (bytes_data or b""),
            run_id=self.run.id,
            arrays=self.arrays,
        )
        if isinstance(parsed, list):
            self.pending.put_nowait(_Frame(parsed, array=True))
        elif isinstance(parsed, protocol.Rejected):
            await self._reject(parsed.seq, parsed.reason)
        else:
            self.pending.put_nowait(_Frame([parsed], array=False))

    async def _write_batches(self):
        try:
            while True:
                frames = [await self.pending.get()]
                count = len(frames[0].parsed)
                while not self.pending.empty() and count < MAX_WRITE_BATCH:
                    frames.append(self.pending.get_nowait())
                    count += len(frames[-1].parsed)
                batch = [message for frame in frames for message in frame.messages]
                outcomes = await self._ingest(run_id=self.run.id, messages=batch) if batch else []
                # Browsers first, acks after: an agent that hangs up on its last ack cancels
                # this task, and a notice still unsent then would be lost.
                await anotify_run_watchers(self.run.id, outcomes)
                await self._answer(frames, iter(outcomes))
                # Only an ended run closes the socket; a conflict refuses that one message.
                if any(outcome.run_ended for outcome in outcomes):
                    await self.close(code=CLOSE_NOT_FOUND)  # the run has ended
                    return
        except asyncio.CancelledError:
            raise
        except Exception:
            # Nothing unacknowledged is lost: the agent reconnects and resends it.
            logger.exception("run %s: ingest failed; closing the agent socket", self.run.id)
            await self.close(code=CLOSE_INTERNAL_ERROR)

    async def _answer(self, frames: list[_Frame], outcomes) -> None:
        """Replies to each frame: a lone message with its ack or refusal, an array with one
        array of them in its order (``outcomes``: those of the frames' messages, in order)."""
        for frame in frames:
            replies = []
            for parsed in frame.parsed:
                if isinstance(parsed, protocol.Rejected):
                    reply = parsed
                else:
                    outcome = next(outcomes)
                    reply = (
                        protocol.Rejected(seq=outcome.seq, reason=outcome.refused)
                        if outcome.refused
                        else protocol.Ack(seq=outcome.seq)
                    )
                if isinstance(reply, protocol.Rejected):
                    self._log_rejected(reply)
                replies.append(reply.model_dump())
            if frame.array:
                await self.send(text_data=json.dumps(replies))
            else:
                await self.send_json(replies[0])

    # Off the shared "thread-sensitive" thread: sockets of different runs write in parallel
    # (each worker thread has its own connection), so their commits overlap.
    _ingest = staticmethod(database_sync_to_async(agent_messages_ingest, thread_sensitive=False))

    async def _reject(self, seq: int | None, reason: str) -> None:
        rejected = protocol.Rejected(seq=seq, reason=reason)
        self._log_rejected(rejected)
        await self.send_json(rejected.model_dump())

    def _log_rejected(self, rejected: protocol.Rejected) -> None:
        logger.info(
            "run %s: rejected agent message %s: %s", self.run.id, rejected.seq, rejected.reason
        )


class RunLiveConsumer(AsyncJsonWebsocketConsumer):
    """``/ws/runs/<run id>/``: a signed-in member of the run's organization receives a notice
    for every stored agent message of that run."""

    async def connect(self):
        user = self.scope.get("user")
        run_id = self.scope["url_route"]["kwargs"]["run_id"]
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        try:
            run = await database_sync_to_async(access_run_of_user)(
                principal=Principal(user=user), run_id=run_id
            )
        except Http404:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = run_group(run.id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code):
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        pass  # notify-only: the browser has nothing to say here

    async def run_updates(self, event):
        for update in event["updates"]:
            await self.send_json(update)
