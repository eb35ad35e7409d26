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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from agents import protocol
from agents.runner.site_link import (
    Backoff,
    Connection,
    Connector,
    LinkDown,
    SiteEndpoints,
    SiteRefused,
    read_site_frame,
    rest_post_batch,
    rest_request_epoch,
    websocket_connector,
)
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

# Half of what a site takes per request: each request stays short.
MAX_REST_BATCH = protocol.MAX_BATCH_MESSAGES // 2
SOCKET_CLOSE_TIMEOUT = 2.0
# A socket refused this many times in a row is taken at its word: the site closes a socket
# with 4404 once after refusing a message, so a single refusal may be that, not the token.
SOCKET_REFUSALS_TO_GIVE_UP = 2


def rest_batch(pending: Mapping[int, str]) -> list[tuple[int, str]]:
    """The oldest of ``pending`` (seq → wire text) that make one REST batch: at most
    ``MAX_REST_BATCH`` messages and ``protocol.MAX_BATCH_BYTES`` of them, which every site
    accepts (a larger body is refused with 413 and would be retried forever); always at least
    one message, so one larger than the batch size is still sent, alone."""
    batch: list[tuple[int, str]] = []
    size = 0
    for seq, text in itertools.islice(pending.items(), MAX_REST_BATCH):
        size += len(text.encode("utf-8")) + 1  # and the comma after it
        if batch and size > protocol.MAX_BATCH_BYTES:
            break
        batch.append((seq, text))
    return batch


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


def _wire(message: dict) -> str:
    # The same compact form the spool writes: the site, the journal and the spool agree.
    return json.dumps(message, separators=(",", ":"))


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


@dataclass
class _Session:
    """What one socket connection achieved, for the backoff and the REST fallback."""

    sent: int = 0
    acked: bool = False


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
        self._on_cancel = on_cancel
        self._on_refused = on_refused
        if connect is None and site is not None and site.ws_url is not None:
            connect = websocket_connector(site)
        self._connect = connect
        self._backoff = backoff
        self._rest_after_failures = rest_after_failures
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
        self._epoch: int | None = None  # the spool's epoch, once the site issued it
        self._unacked: dict[int, str] = {}  # seq -> wire text (with the epoch once known)
        self._acks_to_write: list[int] = []
        self._outgoing: asyncio.Queue[int] | None = None  # the live socket's send queue
        self._socket_live = False
        self._socket_failures = 0
        self._link_tasks: list[asyncio.Task] = []
        # Events bind to the delivery loop on first use, so they can be made here.
        self._changed_event = asyncio.Event()
        self._close_requested = asyncio.Event()
        self._drain_timeout = 0.0
        self._emitted = 0
        self._delivered = 0
        self._rejected: list[dict] = []
        self._used_rest = False
        self._cancelled = False
        self._refused = False

    # -- the caller's side ------------------------------------------------------------------

    def start(self) -> None:
        """Opens the spool (messages a crashed predecessor left are queued for delivery, and
        journaled if it crashed before journaling them) and starts the delivery thread."""
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the outbox is already started")
        spool = Spool(self._spool_dir, self._run_id)
        self._epoch = spool.epoch
        left_over = spool.pending()
        if self._journal_path is not None:
            self._journal_path.parent.mkdir(parents=True, exist_ok=True)
            journaled = _journal_last_seq(self._journal_path, self._run_id)
            missing = [m for m in left_over if m["seq"] > journaled]
            if missing:
                append_lines_durably(self._journal_path, [_wire(m) for m in missing])
        if self._site is None:
            spool.ack_many([m["seq"] for m in left_over])  # the journal was their destination
        else:
            self._unacked = {m["seq"]: self._stamped(m) for m in left_over}
            if left_over:
                logger.info(
                    "run %s: %d message(s) from an earlier agent still to deliver",
                    self._run_id,
                    len(left_over),
                )
        self._spool = spool
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
            if self._epoch is None:
                self._link_tasks.append(asyncio.create_task(self._epoch_loop()))
            if self._connect is not None:
                self._link_tasks.append(asyncio.create_task(self._socket_loop()))
            if self._site.rest_url is not None:
                self._link_tasks.append(asyncio.create_task(self._rest_loop()))
            if not self._link_tasks:
                logger.error("run %s: the site has neither a socket nor a REST URL", self._run_id)
            for task in self._link_tasks:
                task.add_done_callback(self._link_task_done)
        await self._close_requested.wait()
        self._report = await self._drain(self._drain_timeout)

    def _request_close(self, drain_timeout: float) -> None:
        self._drain_timeout = drain_timeout
        self._close_requested.set()

    async def _drain(self, drain_timeout: float) -> DeliveryReport:
        self._take_inbox()  # emit is closed: this is the last of them
        if self._site is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._wait_until(lambda: not self._unacked or self._refused),
                    timeout=max(drain_timeout, 0.0),
                )
        for task in self._link_tasks:
            task.cancel()
        await asyncio.gather(*self._link_tasks, return_exceptions=True)
        self._flush_acks()
        assert self._spool is not None
        try:
            self._spool.compact()
        except OSError as exc:
            # Harmless: the uncompacted files say the same, only longer.
            logger.warning("run %s: could not compact the spool: %s", self._run_id, exc)
        pending = len(self._unacked) if self._site is not None else 0
        if pending:
            logger.warning(
                "run %s: %d message(s) not delivered; they stay in %s",
                self._run_id,
                pending,
                self._spool_dir,
            )
        return DeliveryReport(
            emitted=self._emitted,
            delivered=self._delivered,
            rejected=list(self._rejected),
            pending=pending,
            used_rest=self._used_rest,
            epoch=self._epoch if self._site is not None else None,
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
        texts = [_wire(message) for message in numbered]
        self._emitted += len(numbered)
        if self._site is not None:
            # Spooled is enough to deliver; nothing is sent before the journal write below,
            # as this runs without yielding to the sender.
            for message in numbered:
                self._unacked[message["seq"]] = self._stamped(message)
                if self._outgoing is not None:
                    self._outgoing.put_nowait(message["seq"])
            self._changed()
        if self._journal_path is not None:
            append_lines_durably(self._journal_path, texts)
        if self._site is None:
            self._spool.ack_many([message["seq"] for message in numbered])

    def _only_json(self, batch: list[dict]) -> list[dict]:
        keep = []
        for message in batch:
            try:
                _wire(message)
            except (TypeError, ValueError) as exc:
                reason = f"not JSON: {exc}"
                logger.error(
                    "run %s: dropped a %r message: %s", self._run_id, message.get("type"), reason
                )
                self._rejected.append({"seq": None, "reason": reason})
            else:
                keep.append(message)
        return keep

    # -- the epoch ---------------------------------------------------------------------------

    def _stamped(self, message: dict) -> str:
        """``message`` as sent: in the spool's epoch once it has one. Messages a protocol 1
        agent spooled go as they are (their space is epoch 0)."""
        if self._epoch is None or message.get("protocol", 1) < 2:
            return _wire(message)
        return _wire({**message, "epoch": self._epoch})

    async def _request_epoch_over_rest(self) -> int:
        assert self._site is not None
        async with httpx.AsyncClient() as client:
            return await rest_request_epoch(client, self._site)

    async def _epoch_loop(self) -> None:
        """Gets the spool its epoch from the site, once; nothing is sent before."""
        assert self._spool is not None
        attempt = 0
        while not self._refused:
            try:
                epoch = await self._request_epoch()
            except SiteRefused as exc:
                self._refuse(self._redact(str(exc)))
                return
            except Exception as exc:  # LinkDown, or a requester of someone else's making
                level = logging.WARNING if attempt == 0 else logging.DEBUG
                logger.log(level, "run %s: no epoch yet: %s", self._run_id, self._redact(str(exc)))
            else:
                # Kept before anything is sent in it: a restart on this spool stays in it.
                self._spool.set_epoch(epoch)
                self._epoch = epoch
                self._unacked = {
                    seq: self._stamped(json.loads(text)) for seq, text in self._unacked.items()
                }
                logger.info("run %s: sending in epoch %d", self._run_id, epoch)
                self._changed()
                return
            await asyncio.sleep(self._backoff.delay(attempt))
            attempt += 1

    # -- what the site says -----------------------------------------------------------------

    def _on_frame(self, text: str) -> bool:
        """Handles one site → agent frame; True when it was an acknowledgement."""
        try:
            frame = read_site_frame(text)
        except ValueError as exc:
            logger.warning("run %s: ignored a frame from the site: %s", self._run_id, exc)
            return False
        if isinstance(frame, protocol.Ack):
            self._settle(frame.seq)
            return True
        if isinstance(frame, protocol.Rejected):
            self._reject(frame.seq, frame.reason)
        else:
            self._cancel(frame.reason)
        return False

    def _settle(self, seq: int, *, rejected: str | None = None) -> bool:
        """Takes ``seq`` out of delivery (stored, or refused for good); False if it was not
        pending (a duplicate answer)."""
        if self._unacked.pop(seq, None) is None:
            return False
        if not self._acks_to_write:
            # Acks that arrive in one burst share one fsync. Losing them in a crash only
            # means a resend, which the site acknowledges again.
            asyncio.get_running_loop().call_soon(self._flush_acks)
        self._acks_to_write.append(seq)
        if rejected is None:
            self._delivered += 1
        else:
            self._rejected.append({"seq": seq, "reason": rejected})
        self._changed()
        return True

    def _flush_acks(self) -> None:
        seqs, self._acks_to_write = self._acks_to_write, []
        if not seqs or self._spool is None:
            return
        try:
            self._spool.ack_many(seqs)
        except OSError as exc:
            logger.warning(
                "run %s: could not record %d ack(s); a later agent resends them: %s",
                self._run_id,
                len(seqs),
                exc,
            )

    def _reject(self, seq: int | None, reason: str) -> None:
        reason = self._redact(reason)
        if seq is None:
            self._rejected.append({"seq": None, "reason": reason})
        elif not self._settle(seq, rejected=reason):
            return  # the same message refused again (it was sent twice)
        logger.error("run %s: the site rejected message %s: %s", self._run_id, seq, reason)

    def _cancel(self, reason: str) -> None:
        if self._cancelled:
            return
        self._cancelled = True
        reason = self._redact(reason)
        logger.warning("run %s: the site cancelled the run: %s", self._run_id, reason)
        try:
            self._on_cancel(reason)
        except Exception:
            logger.exception("run %s: on_cancel failed", self._run_id)

    def _refuse(self, reason: str) -> None:
        if self._refused:
            return
        self._refused = True
        logger.error(
            "run %s: the site refused this agent (%s); delivery stopped, %d message(s) kept in %s",
            self._run_id,
            reason,
            len(self._unacked),
            self._spool_dir,
        )
        for task in self._link_tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._changed()
        try:
            self._on_refused(reason)
        except Exception:
            logger.exception("run %s: on_refused failed", self._run_id)

    def _redact(self, text: str) -> str:
        return self._site.redact(text) if self._site is not None else text

    # -- waiting for a change ---------------------------------------------------------------

    def _changed(self) -> None:
        """Wakes everything waiting in ``_wait_until``."""
        event, self._changed_event = self._changed_event, asyncio.Event()
        event.set()

    async def _wait_until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            await self._changed_event.wait()

    # -- the socket -------------------------------------------------------------------------

    async def _socket_loop(self) -> None:
        assert self._connect is not None
        await self._wait_until(lambda: self._epoch is not None or self._refused)
        attempt = 0
        refusals = 0
        while not self._refused:
            session: _Session | None = None
            try:
                connection = await self._connect()
            except (LinkDown, SiteRefused) as exc:
                error: Exception = exc
            except Exception as exc:  # a connector of someone else's making
                error = LinkDown(self._redact(f"cannot open the socket: {exc!r}"))
            else:
                session = _Session()
                error = await self._session(connection, session)

            if isinstance(error, SiteRefused):
                refusals += 1
                if refusals >= SOCKET_REFUSALS_TO_GIVE_UP:
                    self._refuse(self._redact(str(error)))
                    return
            else:
                refusals = 0
            if session is not None and session.acked:
                self._socket_failures = 0
                attempt = 0
            elif session is not None and not session.sent:
                self._socket_failures = 0  # opened fine; there was nothing to deliver
            else:
                self._socket_failures += 1  # not opened, or opened but delivered nothing
            level = logging.WARNING if attempt == 0 else logging.DEBUG
            logger.log(level, "run %s: socket: %s", self._run_id, self._redact(str(error)))
            self._changed()  # the REST fallback may be due now
            await asyncio.sleep(self._backoff.delay(attempt))
            attempt += 1

    async def _session(self, connection: Connection, session: _Session) -> Exception:
        """Runs one open socket until it fails; returns why (``LinkDown``/``SiteRefused``)."""
        logger.info(
            "run %s: socket open; resending %d message(s)", self._run_id, len(self._unacked)
        )
        outgoing: asyncio.Queue[int] = asyncio.Queue()
        for seq in self._unacked:  # every pending message, in seq order, before any new one
            outgoing.put_nowait(seq)
        self._outgoing = outgoing
        self._socket_live = True
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
            self._socket_live = False
            sender.cancel()
            receiver.cancel()
            await asyncio.gather(sender, receiver, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(connection.close(), SOCKET_CLOSE_TIMEOUT)
        if isinstance(error, LinkDown | SiteRefused):
            return error
        return LinkDown(self._redact(f"connection lost: {error!r}"))

    async def _send_all(
        self, connection: Connection, outgoing: asyncio.Queue[int], session: _Session
    ) -> None:
        while True:
            seq = await outgoing.get()
            text = self._unacked.get(seq)
            if text is None:
                continue  # answered meanwhile (over REST, or before a resend)
            await connection.send(text)
            session.sent += 1

    async def _receive_all(self, connection: Connection, session: _Session) -> None:
        while True:
            if self._on_frame(await connection.recv()):
                session.acked = True

    # -- the REST fallback ------------------------------------------------------------------

    def _rest_due(self) -> bool:
        socket_given_up = (
            self._connect is None or self._socket_failures >= self._rest_after_failures
        )
        has_epoch = self._epoch is not None
        return bool(self._unacked) and has_epoch and not self._socket_live and socket_given_up

    async def _rest_loop(self) -> None:
        assert self._site is not None
        attempt = 0
        async with httpx.AsyncClient() as client:
            while not self._refused:
                await self._wait_until(self._rest_due)
                try:
                    progressed = await self._post_batch(client)
                except SiteRefused as exc:
                    self._refuse(self._redact(str(exc)))
                    return
                except LinkDown as exc:
                    level = logging.WARNING if attempt == 0 else logging.DEBUG
                    logger.log(level, "run %s: %s", self._run_id, self._redact(str(exc)))
                    progressed = False
                if progressed:
                    attempt = 0
                    continue
                await asyncio.sleep(self._backoff.delay(attempt))
                attempt += 1

    async def _post_batch(self, client: httpx.AsyncClient) -> bool:
        """POSTs the oldest pending messages; True if the site settled at least one."""
        assert self._site is not None
        batch = rest_batch(self._unacked)
        answer = await rest_post_batch(client, self._site, batch)
        before = len(self._unacked)
        for seq in answer.acked:
            if self._settle(seq):
                self._used_rest = True
        for refusal in answer.rejected:
            self._reject(refusal.seq, refusal.reason)
        if answer.cancel is not None:
            self._cancel(answer.cancel.reason)
        return len(self._unacked) < before
