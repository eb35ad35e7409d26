"""The outbox's socket: delivers pending messages over the site's agent WebSocket.

Guarantees:

- Each time the socket opens, every pending message is sent again, in seq order, before any
  new one; a message answered meanwhile (over REST, or before its resend) is not sent.
- Acknowledgements that arrived before a drop are still read (for at most
  ``SOCKET_CLOSE_TIMEOUT`` seconds), so their messages are not resent for nothing.
- A socket refused ``SOCKET_REFUSALS_TO_GIVE_UP`` times in a row refuses the agent; any
  other failure is retried with the backoff, and counted in ``failures`` (what the REST
  fallback waits for) unless the socket opened and there was nothing to deliver.
- Nothing is sent before the spool has its epoch.
- On a socket the site opened with ``protocol.BATCH_SUBPROTOCOL``, the messages queued when
  one is sent go with it in array frames within the protocol's batch limits
  (``delivery_batch``); otherwise one message per frame, as every site takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from agents import protocol
from agents.runner.delivery_ledger import DeliveryLedger, delivery_batch
from agents.runner.site_link import Backoff, Connection, Connector, LinkDown, SiteRefused

logger = logging.getLogger(__name__)

SOCKET_CLOSE_TIMEOUT = 2.0
# A socket refused this many times in a row is taken at its word: the site closes a socket
# with 4404 once after refusing a message, so a single refusal may be that, not the token.
SOCKET_REFUSALS_TO_GIVE_UP = 2


@dataclass
class _Session:
    """What one socket connection achieved, for the backoff and the REST fallback."""

    sent: int = 0
    acked: bool = False


class SocketDelivery:
    """Keeps a socket to the site open while the ledger has messages to deliver."""

    def __init__(self, ledger: DeliveryLedger, connect: Connector, backoff: Backoff):
        self._ledger = ledger
        self._connect = connect
        self._backoff = backoff
        self._outgoing: asyncio.Queue[int] | None = None  # the live socket's send queue
        self.live = False
        self.failures = 0  # sockets in a row that delivered nothing

    def queue(self, seq: int) -> None:
        """Sends the newly spooled ``seq`` on the live socket, if one is open (a socket
        opened later sends it with every other pending message)."""
        if self._outgoing is not None:
            self._outgoing.put_nowait(seq)

    async def run(self) -> None:
        ledger = self._ledger
        await ledger.wait_until(lambda: ledger.epoch is not None or ledger.refused)
        attempt = 0
        refusals = 0
        while not ledger.refused:
            session: _Session | None = None
            try:
                connection = await self._connect()
            except (LinkDown, SiteRefused) as exc:
                error: Exception = exc
            except Exception as exc:  # a connector of someone else's making
                error = LinkDown(ledger.redact(f"cannot open the socket: {exc!r}"))
            else:
                session = _Session()
                error = await self._session(connection, session)

            if isinstance(error, SiteRefused):
                refusals += 1
                if refusals >= SOCKET_REFUSALS_TO_GIVE_UP:
                    ledger.refuse(ledger.redact(str(error)))
                    return
            else:
                refusals = 0
            if session is not None and session.acked:
                self.failures = 0
                attempt = 0
            elif session is not None and not session.sent:
                self.failures = 0  # opened fine; there was nothing to deliver
            else:
                self.failures += 1  # not opened, or opened but delivered nothing
            level = logging.WARNING if attempt == 0 else logging.DEBUG
            logger.log(level, "run %s: socket: %s", ledger.run_id, ledger.redact(str(error)))
            ledger.changed()  # the REST fallback may be due now
            await asyncio.sleep(self._backoff.delay(attempt))
            attempt += 1

    async def _session(self, connection: Connection, session: _Session) -> Exception:
        """Runs one open socket until it fails; returns why (``LinkDown``/``SiteRefused``)."""
        ledger = self._ledger
        logger.info(
            "run %s: socket open; resending %d message(s)", ledger.run_id, len(ledger.unacked)
        )
        outgoing: asyncio.Queue[int] = asyncio.Queue()
        for seq in ledger.unacked:  # every pending message, in seq order, before any new one
            outgoing.put_nowait(seq)
        self._outgoing = outgoing
        self.live = True
        sender = asyncio.create_task(self._send_all(connection, outgoing, session))
        receiver = asyncio.create_task(self._receive_all(connection, session))
        try:
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            error = next(iter(done)).exception()
            if receiver not in done:
                # Sending failed, but acks that arrived before the drop may still be buffered:
                # read them, or their messages are resent for nothing. The receiver ends when
                # the buffer is empty on a closed connection.
                await asyncio.wait({receiver}, timeout=SOCKET_CLOSE_TIMEOUT)
        finally:
            self._outgoing = None
            self.live = False
            sender.cancel()
            receiver.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), SOCKET_CLOSE_TIMEOUT)
        if isinstance(error, LinkDown | SiteRefused):
            return error
        return LinkDown(ledger.redact(f"connection lost: {error!r}"))

    async def _send_all(
        self, connection: Connection, outgoing: asyncio.Queue[int], session: _Session
    ) -> None:
        arrays = getattr(connection, "carries_arrays", False)
        while True:
            seqs = [await outgoing.get()]
            if arrays:
                # Whatever queued up meanwhile (a backlog after a reconnect, a burst) goes
                # in array frames: the site's cost is per frame, not per message.
                while not outgoing.empty():
                    seqs.append(outgoing.get_nowait())
            # A message answered meanwhile (over REST, or before a resend) is not sent.
            pending = [(seq, text) for seq in seqs if (text := self._ledger.unacked.get(seq))]
            if not arrays:
                for _, text in pending:
                    await connection.send(text)
                    session.sent += 1
                continue
            while pending:
                frame = delivery_batch(pending)
                pending = pending[len(frame) :]
                await connection.send(protocol.array_frame([text for _, text in frame]))
                session.sent += len(frame)

    async def _receive_all(self, connection: Connection, session: _Session) -> None:
        while True:
            if self._ledger.on_frame(await connection.recv()):
                session.acked = True
