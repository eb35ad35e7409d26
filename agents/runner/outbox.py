"""The agent's outbox: every message the runner emits is numbered, kept on disk and delivered
to the site, without the runner ever waiting for a disk or the network.

Guarantees:
- ``emit`` only queues (a lock, a list append, at most one wake-up of the delivery thread); it
  never blocks on disk or network and may be called from any thread.
- Every emitted message gets the run's next sequence number and is in the spool (fsync'd)
  before it is sent; numbers are never reused, across agent restarts included.
- With a site, every message is sent in the spool's epoch: a new spool first asks the site
  for one (``POST …/epoch/``, retried like any delivery) and keeps it with the spool before
  it sends anything, so an agent restarted without its workdir numbers from 0 in a space of
  its own, and one resuming on its spool stays in its epoch. The spool and journal lines
  carry no epoch; it is added to each message as it is sent.
- The journal, when given, holds every numbered message once, in order, as one JSON line —
  the agent's own record, and the whole result when there is no site.
- With a site, a message leaves the spool only when the site acknowledged it or refused it
  for good (``rejected``: recorded in the report, never resent). Anything else is resent
  after every reconnect, over the REST batch when the socket cannot be reopened, and by the
  next agent on the same spool folder when this one gives up.
- ``on_cancel`` and ``on_refused`` are each called at most once, from the delivery thread.
- The run token appears in no log line, repr, exception, journal or report.

The outbox numbers, spools and journals; ``delivery_ledger`` keeps what is pending and what
the site answered; ``socket_delivery`` and ``rest_delivery`` carry messages to the site.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agents import protocol
from agents.runner.delivery_ledger import DeliveryLedger, wire
from agents.runner.rest_delivery import RestDelivery
from agents.runner.site_link import (
    Backoff,
    Connection,
    Connector,
    LinkDown,
    SiteEndpoints,
    SiteRefused,
    rest_request_epoch,
    websocket_connector,
)
from agents.runner.socket_delivery import SocketDelivery
from agents.spool import Spool, append_lines_durably

__all__ = [
    "Backoff",
    "Connection",
    "Connector",
    "DeliveryReport",
    "LinkDown",
    "Outbox",
    "OutboxBroken",
    "SiteEndpoints",
    "SiteRefused",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeliveryReport:
    """What became of the messages during one outbox's life (see ``Outbox.close``)."""

    emitted: int
    delivered: int
    rejected: list[dict] = field(default_factory=list)
    pending: int = 0
    used_rest: bool = False
    epoch: int | None = None  # the epoch it sent in (None: none was issued, or no site)


class OutboxBroken(RuntimeError):
    """The outbox could not write its spool or journal: messages emitted after that were not
    kept. ``report`` says what was delivered before (None if the delivery thread died)."""

    def __init__(self, message: str, report: DeliveryReport | None = None):
        super().__init__(message)
        self.report = report


def _journal_last_seq(path: Path, run_id: str) -> int:
    """The highest seq of ``run_id`` in the journal (-1 if none); ends a line torn by a crash
    so the next append starts on a line of its own."""
    if not path.exists():
        return -1
    last = -1
    with path.open("rb") as file:
        data = file.read()
    for line in data.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or message.get("run_id") != run_id:
            continue
        seq = message.get("seq")
        if isinstance(seq, int) and seq > last:
            last = seq
    if data and not data.endswith(b"\n"):
        with path.open("a", encoding="utf-8") as file:
            file.write("\n")
    return last


class Outbox:
    """Numbers, spools, journals and delivers one run's messages (see the module docstring).

    ``start`` opens the spool folder (raising if it cannot) and starts the delivery thread;
    messages left unacknowledged there by an earlier agent are delivered first. ``close``
    keeps delivering for at most ``drain_timeout`` seconds and reports.

    Without a site (``site=None``) the journal is the destination: a message is done once it
    is journaled, and ``close`` reports ``pending=0``."""

    def __init__(
        self,
        *,
        run_id: str,
        spool_dir: Path,
        journal_path: Path | None = None,
        site: SiteEndpoints | None = None,
        on_cancel: Callable[[str], None] = lambda reason: None,
        on_refused: Callable[[str], None] = lambda reason: None,
        connect: Connector | None = None,
        backoff: Backoff = Backoff(),  # noqa: B008 (frozen, so sharing the default is safe)
        rest_after_failures: int = 3,
        request_epoch: Callable[[], Awaitable[int]] | None = None,
    ):
        if site is not None and str(site.run_id) != str(run_id):
            raise ValueError("the site endpoints are for another run")
        if site is not None and request_epoch is None and site.rest_url is None:
            raise ValueError("a site without a REST URL cannot issue this agent its epoch")
        self._run_id = str(run_id)
        self._spool_dir = Path(spool_dir)
        self._journal_path = Path(journal_path) if journal_path is not None else None
        self._site = site
        if connect is None and site is not None and site.ws_url is not None:
            connect = websocket_connector(site)
        self._backoff = backoff
        self._request_epoch = request_epoch or self._request_epoch_over_rest

        # Shared with emitting threads, under _lock.
        self._lock = threading.Lock()
        self._inbox: list[dict] = []
        self._wake_scheduled = False
        self._accepting = True
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._close_lock = threading.Lock()
        self._report: DeliveryReport | None = None
        self._failure: BaseException | None = None

        # The delivery thread's own state (set up by start, then touched only there).
        self._spool: Spool | None = None
        self._ledger = DeliveryLedger(
            run_id=self._run_id,
            spool_dir=self._spool_dir,
            site=site,
            on_cancel=on_cancel,
            on_refused=on_refused,
        )
        self._socket = (
            SocketDelivery(self._ledger, connect, backoff)
            if site is not None and connect is not None
            else None
        )
        self._rest = (
            RestDelivery(
                self._ledger,
                site,
                backoff,
                socket=self._socket,
                rest_after_failures=rest_after_failures,
            )
            if site is not None and site.rest_url is not None
            else None
        )
        # Binds to the delivery loop on first use, so it can be made here.
        self._close_requested = asyncio.Event()
        self._drain_timeout = 0.0
        self._emitted = 0

    # -- the caller's side ------------------------------------------------------------------

    def start(self) -> None:
        """Opens the spool (messages a crashed predecessor left are queued for delivery, and
        journaled if it crashed before journaling them) and starts the delivery thread."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the outbox is already started")
        spool = Spool(self._spool_dir, self._run_id)
        ledger = self._ledger
        ledger.epoch = spool.epoch
        left_over = spool.pending()
        if self._journal_path is not None:
            self._journal_path.parent.mkdir(parents=True, exist_ok=True)
            journaled = _journal_last_seq(self._journal_path, self._run_id)
            missing = [m for m in left_over if m["seq"] > journaled]
            if missing:
                append_lines_durably(self._journal_path, [wire(m) for m in missing])
        if self._site is None:
            spool.ack_many([m["seq"] for m in left_over])  # the journal was their destination
        else:
            ledger.unacked = {m["seq"]: ledger.stamped(m) for m in left_over}
            if left_over:
                logger.info(
                    "run %s: %d message(s) from an earlier agent still to deliver",
                    self._run_id,
                    len(left_over),
                )
        self._spool = ledger.spool = spool
        loop = asyncio.new_event_loop()
        thread = threading.Thread(
            target=self._thread_main, name=f"outbox-{self._run_id[:8]}", daemon=True
        )
        with self._lock:
            self._loop, self._thread = loop, thread
            if self._inbox:
                self._wake_scheduled = True
                loop.call_soon_threadsafe(self._take_inbox)
        thread.start()

    def emit(self, message: dict) -> None:
        """Queues ``message`` (without ``run_id``/``seq``/``protocol``; the outbox adds them).
        Never blocks. The dict is copied; do not mutate values nested in it afterwards.
        Raises ``RuntimeError`` after ``close`` and ``OutboxBroken`` once the disk failed."""
        if self._failure is not None:
            raise OutboxBroken(f"the outbox cannot keep messages: {self._failure}")
        with self._lock:
            if not self._accepting:
                raise RuntimeError("the outbox is closed")
            self._inbox.append(dict(message))
            if self._loop is not None and not self._wake_scheduled:
                self._wake_scheduled = True
                self._loop.call_soon_threadsafe(self._take_inbox)

    def close(self, *, drain_timeout: float) -> DeliveryReport:
        """Spools everything emitted so far (whatever the timeout), delivers until nothing is
        pending, the site refused the token, or ``drain_timeout`` seconds passed, then stops
        the thread, compacts the spool and reports. Calling it again returns the same report.

        Raises ``OutboxBroken`` (with the report) if the spool or journal could not be
        written: some emitted messages were then not kept."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("close the outbox from another thread than its own (a callback)")
        with self._close_lock:
            if self._report is None:
                self._stop(drain_timeout)
            if self._failure is not None:
                raise OutboxBroken(
                    f"the outbox could not keep every message: {self._failure}", self._report
                )
            if self._report is None:
                raise OutboxBroken("the outbox's delivery thread died; see the log")
            return self._report

    def _stop(self, drain_timeout: float) -> None:
        with self._lock:
            self._accepting = False
            started = self._thread is not None
        if not started:
            self.start()  # what was emitted before start must still reach the spool
        assert self._loop is not None and self._thread is not None
        # A dead thread's loop is closed; then there is nothing left to ask it.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._request_close, drain_timeout)
        self._thread.join()

    # -- the delivery thread ----------------------------------------------------------------

    def _thread_main(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException:
            logger.exception("run %s: the outbox's delivery thread failed", self._run_id)
        finally:
            # As asyncio.run does: nothing is left half-run when the loop closes.
            leftovers = asyncio.all_tasks(loop)
            for task in leftovers:
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self) -> None:
        self._take_inbox()
        if self._site is not None:
            tasks = self._ledger.link_tasks
            if self._ledger.epoch is None:
                tasks.append(asyncio.create_task(self._epoch_loop()))
            if self._socket is not None:
                tasks.append(asyncio.create_task(self._socket.run()))
            if self._rest is not None:
                tasks.append(asyncio.create_task(self._rest.run()))
            if not tasks:
                logger.error("run %s: the site has neither a socket nor a REST URL", self._run_id)
            for task in tasks:
                task.add_done_callback(self._link_task_done)
        await self._close_requested.wait()
        self._report = await self._drain(self._drain_timeout)

    def _request_close(self, drain_timeout: float) -> None:
        self._drain_timeout = drain_timeout
        self._close_requested.set()

    async def _drain(self, drain_timeout: float) -> DeliveryReport:
        self._take_inbox()  # emit is closed: this is the last of them
        ledger = self._ledger
        if self._site is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    ledger.wait_until(lambda: not ledger.unacked or ledger.refused),
                    timeout=max(drain_timeout, 0.0),
                )
        for task in ledger.link_tasks:
            task.cancel()
        await asyncio.gather(*ledger.link_tasks, return_exceptions=True)
        ledger.flush_acks()
        assert self._spool is not None
        try:
            self._spool.compact()
        except OSError as exc:
            # Harmless: the uncompacted files say the same, only longer.
            logger.warning("run %s: could not compact the spool: %s", self._run_id, exc)
        pending = len(ledger.unacked) if self._site is not None else 0
        if pending:
            logger.warning(
                "run %s: %d message(s) not delivered; they stay in %s",
                self._run_id,
                pending,
                self._spool_dir,
            )
        return DeliveryReport(
            emitted=self._emitted,
            delivered=ledger.delivered,
            rejected=list(ledger.rejected),
            pending=pending,
            used_rest=ledger.used_rest,
            epoch=ledger.epoch if self._site is not None else None,
        )

    def _link_task_done(self, task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "run %s: a delivery task failed; delivery continues without it",
                self._run_id,
                exc_info=task.exception(),
            )

    # -- numbering and spooling -------------------------------------------------------------

    def _take_inbox(self) -> None:
        with self._lock:
            self._wake_scheduled = False
            batch, self._inbox = self._inbox, []
        if not batch:
            return
        if self._failure is not None:
            logger.error("run %s: %d message(s) lost: %s", self._run_id, len(batch), self._failure)
            return
        try:
            self._number(batch)
        except OSError as exc:
            self._failure = exc
            logger.exception(
                "run %s: cannot write the spool or journal; %d message(s) lost",
                self._run_id,
                len(batch),
            )

    def _number(self, batch: list[dict]) -> None:
        assert self._spool is not None
        batch = [{"protocol": protocol.PROTOCOL_VERSION, **message} for message in batch]
        try:
            numbered = self._spool.append_many(batch)
        except (TypeError, ValueError):
            # Something in the batch is not JSON; the spool numbered nothing. Keep the rest.
            numbered = self._spool.append_many(self._only_json(batch))
        texts = [wire(message) for message in numbered]
        self._emitted += len(numbered)
        if self._site is not None:
            # Spooled is enough to deliver; nothing is sent before the journal write below,
            # as this runs without yielding to the sender.
            for message in numbered:
                self._ledger.unacked[message["seq"]] = self._ledger.stamped(message)
                if self._socket is not None:
                    self._socket.queue(message["seq"])
            self._ledger.changed()
        if self._journal_path is not None:
            append_lines_durably(self._journal_path, texts)
        if self._site is None:
            self._spool.ack_many([message["seq"] for message in numbered])

    def _only_json(self, batch: list[dict]) -> list[dict]:
        keep = []
        for message in batch:
            try:
                wire(message)
            except (TypeError, ValueError) as exc:
                reason = f"not JSON: {exc}"
                logger.error(
                    "run %s: dropped a %r message: %s", self._run_id, message.get("type"), reason
                )
                self._ledger.rejected.append({"seq": None, "reason": reason})
            else:
                keep.append(message)
        return keep

    # -- the epoch ---------------------------------------------------------------------------

    async def _request_epoch_over_rest(self) -> int:
        assert self._site is not None
        async with httpx.AsyncClient() as client:
            return await rest_request_epoch(client, self._site)

    async def _epoch_loop(self) -> None:
        """Gets the spool its epoch from the site, once; nothing is sent before."""
        assert self._spool is not None
        attempt = 0
        ledger = self._ledger
        while not ledger.refused:
            try:
                epoch = await self._request_epoch()
            except SiteRefused as exc:
                ledger.refuse(ledger.redact(str(exc)))
                return
            except Exception as exc:  # LinkDown, or a requester of someone else's making
                level = logging.WARNING if attempt == 0 else logging.DEBUG
                logger.log(level, "run %s: no epoch yet: %s", self._run_id, ledger.redact(str(exc)))
            else:
                # Kept before anything is sent in it: a restart on this spool stays in it.
                self._spool.set_epoch(epoch)
                logger.info("run %s: sending in epoch %d", self._run_id, epoch)
                ledger.enter_epoch(epoch)
                return
            await asyncio.sleep(self._backoff.delay(attempt))
            attempt += 1
