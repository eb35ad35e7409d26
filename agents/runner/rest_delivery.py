"""The outbox's REST fallback: delivers pending messages in batches over ``POST …/messages/``.

Guarantees:

- It sends only while no socket is live and the socket has given up (none configured, or
  ``rest_after_failures`` sockets in a row delivered nothing), and only in the spool's epoch.
- Every batch is one that every site accepts (``delivery_batch``); the oldest pending messages
  go first.
- A refusal of the token refuses the agent; any other failure is retried with the backoff,
  which restarts after every batch that settled something.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from agents.runner.delivery_ledger import DeliveryLedger, delivery_batch
from agents.runner.site_link import (
    Backoff,
    LinkDown,
    SiteEndpoints,
    SiteRefused,
    rest_post_batch,
)
from agents.runner.socket_delivery import SocketDelivery

logger = logging.getLogger(__name__)


class RestDelivery:
    """Posts the ledger's pending messages while the socket cannot deliver them."""

    def __init__(
        self,
        ledger: DeliveryLedger,
        site: SiteEndpoints,
        backoff: Backoff,
        *,
        socket: SocketDelivery | None,
        rest_after_failures: int,
    ):
        self._ledger = ledger
        self._site = site
        self._backoff = backoff
        self._socket = socket
        self._rest_after_failures = rest_after_failures

    def _due(self) -> bool:
        socket = self._socket
        socket_given_up = socket is None or socket.failures >= self._rest_after_failures
        socket_live = socket is not None and socket.live
        has_epoch = self._ledger.epoch is not None
        return bool(self._ledger.unacked) and has_epoch and not socket_live and socket_given_up

    async def run(self) -> None:
        ledger = self._ledger
        attempt = 0
        async with httpx.AsyncClient() as client:
            while not ledger.refused:
                await ledger.wait_until(self._due)
                try:
                    progressed = await self._post_batch(client)
                except SiteRefused as exc:
                    ledger.refuse(ledger.redact(str(exc)))
                    return
                except LinkDown as exc:
                    level = logging.WARNING if attempt == 0 else logging.DEBUG
                    logger.log(level, "run %s: %s", ledger.run_id, ledger.redact(str(exc)))
                    progressed = False
                if progressed:
                    attempt = 0
                    continue
                await asyncio.sleep(self._backoff.delay(attempt))
                attempt += 1

    async def _post_batch(self, client: httpx.AsyncClient) -> bool:
        """POSTs the oldest pending messages; True if the site settled at least one."""
        ledger = self._ledger
        batch = delivery_batch(ledger.unacked.items())
        answer = await rest_post_batch(client, self._site, batch)
        before = len(ledger.unacked)
        for seq in answer.acked:
            if ledger.settle(seq):
                ledger.used_rest = True
        for refusal in answer.rejected:
            ledger.reject(refusal.seq, refusal.reason)
        if answer.cancel is not None:
            ledger.cancel(answer.cancel.reason)
        return len(ledger.unacked) < before
