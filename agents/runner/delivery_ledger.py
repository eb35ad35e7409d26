"""What the site still has to settle of one outbox's messages, and what it answered.

Guarantees (for the outbox and its socket and REST deliveries, on the delivery thread):

- ``unacked`` holds every message the site has neither stored nor refused for good, by seq,
  as the wire text it is sent as (in the spool's epoch once there is one).
- A message is settled once: ``settle`` of a seq no longer pending is a no-op, so a duplicate
  answer (the socket and REST both, or a resend) counts nothing twice. Settled seqs are
  recorded in the spool, a burst of them in one fsync.
- ``on_cancel`` and ``on_refused`` are each called at most once; every reason logged or
  reported passes through ``redact`` (the run token appears nowhere).
- ``changed`` wakes everything waiting in ``wait_until``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from agents import protocol
from agents.runner.site_link import SiteEndpoints, read_site_frames
from agents.spool import Spool

logger = logging.getLogger(__name__)


# Half of what a site takes per REST request or array frame: each stays short.
MAX_DELIVERY_BATCH = protocol.MAX_BATCH_MESSAGES // 2


def delivery_batch(pending: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The first of ``pending`` ((seq, wire text), oldest first) that make one batch — a REST
    request or a socket's array frame: at most ``MAX_DELIVERY_BATCH`` messages and
    ``protocol.MAX_BATCH_BYTES`` of them, which every site accepts (a larger body is refused
    with 413 and would be retried forever); always at least one message, so one larger than
    the batch size is still sent, alone."""
    batch: list[tuple[int, str]] = []
    size = 0
    for seq, text in itertools.islice(pending, MAX_DELIVERY_BATCH):
        size += len(text.encode("utf-8")) + 1  # and the comma after it
        if batch and size > protocol.MAX_BATCH_BYTES:
            break
        batch.append((seq, text))
    return batch


def wire(message: dict) -> str:
    """A message's compact JSON form: the site, the journal and the spool agree on it."""
    return json.dumps(message, separators=(",", ":"))


class DeliveryLedger:
    """One run's pending messages and the site's answers (see the module docstring)."""

    def __init__(
        self,
        *,
        run_id: str,
        spool_dir: Path,
        site: SiteEndpoints | None,
        on_cancel: Callable[[str], None],
        on_refused: Callable[[str], None],
    ):
        self.run_id = run_id
        self._spool_dir = spool_dir
        self._site = site
        self._on_cancel = on_cancel
        self._on_refused = on_refused
        self.spool: Spool | None = None
        self.epoch: int | None = None  # the spool's epoch, once the site issued it
        self.unacked: dict[int, str] = {}  # seq -> wire text (with the epoch once known)
        self._acks_to_write: list[int] = []
        # Stopped when the site refuses this agent (all but the one that found out).
        self.link_tasks: list[asyncio.Task] = []
        # The event binds to the delivery loop on first use, so it can be made here.
        self._changed_event = asyncio.Event()
        self.delivered = 0
        self.rejected: list[dict] = []
        self.used_rest = False
        self.cancelled = False
        self.refused = False

    # -- the epoch ---------------------------------------------------------------------------

    def stamped(self, message: dict) -> str:
        """``message`` as sent: in the spool's epoch once it has one. Messages a protocol 1
        agent spooled go as they are (their space is epoch 0)."""
        if self.epoch is None or message.get("protocol", 1) < 2:
            return wire(message)
        return wire({**message, "epoch": self.epoch})

    def enter_epoch(self, epoch: int) -> None:
        """Sends everything still pending, and all that follows, in ``epoch``."""
        self.epoch = epoch
        self.unacked = {seq: self.stamped(json.loads(text)) for seq, text in self.unacked.items()}
        self.changed()

    # -- what the site says -----------------------------------------------------------------

    def on_frame(self, text: str) -> bool:
        """Handles one site → agent frame (one reply, or an array of them); True when it
        acknowledged something."""
        try:
            frames = read_site_frames(text)
        except ValueError as exc:
            logger.warning("run %s: ignored a frame from the site: %s", self.run_id, exc)
            return False
        acked = False
        for frame in frames:
            if isinstance(frame, protocol.Ack):
                self.settle(frame.seq)
                acked = True
            elif isinstance(frame, protocol.Rejected):
                self.reject(frame.seq, frame.reason)
            else:
                self.cancel(frame.reason)
        return acked

    def settle(self, seq: int, *, rejected: str | None = None) -> bool:
        """Takes ``seq`` out of delivery (stored, or refused for good); False if it was not
        pending (a duplicate answer)."""
        if self.unacked.pop(seq, None) is None:
            return False
        if not self._acks_to_write:
            # Acks that arrive in one burst share one fsync. Losing them in a crash only
            # means a resend, which the site acknowledges again.
            asyncio.get_running_loop().call_soon(self.flush_acks)
        self._acks_to_write.append(seq)
        if rejected is None:
            self.delivered += 1
        else:
            self.rejected.append({"seq": seq, "reason": rejected})
        self.changed()
        return True

    def flush_acks(self) -> None:
        seqs, self._acks_to_write = self._acks_to_write, []
        if not seqs or self.spool is None:
            return
        try:
            self.spool.ack_many(seqs)
        except OSError as exc:
            logger.warning(
                "run %s: could not record %d ack(s); a later agent resends them: %s",
                self.run_id,
                len(seqs),
                exc,
            )

    def reject(self, seq: int | None, reason: str) -> None:
        reason = self.redact(reason)
        if seq is None:
            self.rejected.append({"seq": None, "reason": reason})
        elif not self.settle(seq, rejected=reason):
            return  # the same message refused again (it was sent twice)
        logger.error("run %s: the site rejected message %s: %s", self.run_id, seq, reason)

    def cancel(self, reason: str) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        reason = self.redact(reason)
        logger.warning("run %s: the site cancelled the run: %s", self.run_id, reason)
        try:
            self._on_cancel(reason)
        except Exception:
            logger.exception("run %s: on_cancel failed", self.run_id)

    def refuse(self, reason: str) -> None:
        if self.refused:
            return
        self.refused = True
        logger.error(
            "run %s: the site refused this agent (%s); delivery stopped, %d message(s) kept in %s",
            self.run_id,
            reason,
            len(self.unacked),
            self._spool_dir,
        )
        for task in self.link_tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self.changed()
        try:
            self._on_refused(reason)
        except Exception:
            logger.exception("run %s: on_refused failed", self.run_id)

    def redact(self, text: str) -> str:
        return self._site.redact(text) if self._site is not None else text

    # -- waiting for a change ---------------------------------------------------------------

    def changed(self) -> None:
        """Wakes everything waiting in ``wait_until``."""
        event, self._changed_event = self._changed_event, asyncio.Event()
        event.set()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed_event.wait()
