"""The outbox: every emitted message reaches the site once, through cut sockets, a dead
socket, a site that is down, and agent restarts; refusals, cancels and the token."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid

import httpx
import pytest

from agents import protocol
from agents.runner.delivery_ledger import MAX_DELIVERY_BATCH
from agents.runner.outbox import Backoff, Outbox, OutboxBroken, SiteEndpoints
from agents.runner.site_link import LinkDown, rest_request_epoch, websocket_connector
from agents.spool import Spool
from tests.agents.fake_site import FakeSite, free_port

TOKEN = "bsr_" + "s3cr3t" * 6
FAST = Backoff(initial=0.005, factor=2, maximum=0.05)
DRAIN = 15.0  # generous: close returns as soon as everything is delivered


@pytest.fixture
def run_id():
    return str(uuid.uuid4())


@pytest.fixture
def site(run_id):
    site = FakeSite(run_id=run_id, token=TOKEN).start()
    yield site
    site.close()


def _beat(n: int, **extra) -> dict:
    return {"type": "heartbeat", "trial": n, **extra}


def _outbox(tmp_path, run_id, endpoints, **kwargs) -> Outbox:
    kwargs.setdefault("journal_path", tmp_path / "journal.jsonl")
    kwargs.setdefault("backoff", FAST)
    kwargs.setdefault("spool_dir", tmp_path / "spool")
    return Outbox(run_id=run_id, site=endpoints, **kwargs)


def _epochs_of(site: FakeSite):
    """An epoch requester that needs no REST URL (for an outbox with a socket only)."""

    async def request_epoch() -> int:
        return site.issue_epoch()

    return request_epoch


def _journal(tmp_path) -> list[dict]:
    lines = (tmp_path / "journal.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


class Recorder:
    """Collects callback calls, from whichever thread."""

    def __init__(self):
        self.calls: list[str] = []
        self.called = threading.Event()

    def __call__(self, reason: str) -> None:
        self.calls.append(reason)
        self.called.set()


def test_it_stores_everything_once_in_order_and_journals_it(tmp_path, run_id, site):
    outbox = _outbox(tmp_path, run_id, site.endpoints())
    outbox.start()
    for n in range(50):
        outbox.emit(_beat(n))
    report = outbox.close(drain_timeout=DRAIN)

    assert (report.emitted, report.delivered, report.pending) == (50, 50, 0)
    assert report.rejected == [] and not report.used_rest
    assert site.stored() == list(range(50))
    assert site.conflicts == []
    journal = _journal(tmp_path)
    assert [m["seq"] for m in journal] == list(range(50))
    assert [m["trial"] for m in journal] == list(range(50))  # emit order is seq order
    # The site got the journal's text, in the epoch the site issued to this spool.
    assert (site.epochs_issued, report.epoch) == (1, 1)
    assert all(site.ledger[(1, m["seq"])] == {**m, "epoch": 1} for m in journal)
    assert journal[0] == {
        "protocol": protocol.PROTOCOL_VERSION,
        "type": "heartbeat",
        "trial": 0,
        "run_id": run_id,
        "seq": 0,
    }
    assert Spool(tmp_path / "spool", run_id).pending() == []  # acknowledged and compacted


def test_it_reconnects_after_every_cut_without_losing_or_repeating(tmp_path, run_id, site):
    site.cut_after = 7  # every socket is closed after 7 messages
    outbox = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    outbox.start()
    for n in range(100):
        outbox.emit(_beat(n))
    report = outbox.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(100))
    assert site.conflicts == []  # no seq was ever used for two messages
    assert site.connections >= 100 // 7
    assert (report.delivered, report.pending, report.used_rest) == (100, 0, False)


def test_it_resends_what_a_dropped_socket_left_unacknowledged(tmp_path, run_id, site):
    site.drop_after = 5  # the first socket dies without a close frame; its acks may be lost
    outbox = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    outbox.start()
    for n in range(30):
        outbox.emit(_beat(n))
    report = outbox.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(30))
    assert site.conflicts == []
    assert site.connections >= 2
    assert sum(site.receipts.values()) >= 30  # resends of stored ones are acknowledged again
    assert (report.delivered, report.pending) == (30, 0)


def test_a_site_offering_arrays_gets_the_backlog_in_array_frames(tmp_path, run_id, site):
    site.arrays = True
    site.stop()  # a backlog builds up while the site is away
    first = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    first.start()
    for n in range(600):
        first.emit(_beat(n))
    assert first.close(drain_timeout=0.3).pending == 600
    site.start()
    second = _outbox(
        tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site)
    )  # resumed on its spool
    second.start()
    report = second.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(600)) and site.conflicts == []
    assert (report.delivered, report.pending, report.rejected) == (600, 0, [])
    # The backlog went in frames of many messages, none beyond what every site takes.
    assert 2 <= site.array_frames < 600 and 1 < site.max_frame <= MAX_DELIVERY_BATCH
    assert sum(site.receipts.values()) == 600  # each answered in its array, none resent


def test_an_array_frames_rejection_settles_only_its_own_message(tmp_path, run_id, site):
    site.arrays = True
    site.stop()
    first = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    first.start()
    for n in range(10):
        first.emit(_beat(n, poison=True) if n == 4 else _beat(n))  # a field it does not know
    first.close(drain_timeout=0.3)
    site.start()
    second = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    second.start()
    report = second.close(drain_timeout=DRAIN)

    assert site.array_frames >= 1
    assert site.stored() == [0, 1, 2, 3, 5, 6, 7, 8, 9]
    assert [r["seq"] for r in report.rejected] == [4] and report.pending == 0


def test_a_site_without_arrays_gets_one_message_per_frame(tmp_path, run_id, site):
    site.stop()
    first = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    first.start()
    for n in range(40):
        first.emit(_beat(n))
    first.close(drain_timeout=0.3)
    site.start()
    second = _outbox(tmp_path, run_id, site.endpoints(rest=False), request_epoch=_epochs_of(site))
    second.start()
    report = second.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(40)) and report.pending == 0
    assert site.array_frames == 0


def test_it_delivers_over_rest_when_the_socket_never_opens(tmp_path, run_id, site):
    dead_socket = SiteEndpoints(
        run_id=run_id,
        token=TOKEN,
        ws_url=f"ws://127.0.0.1:{free_port()}/ws/agent/runs/{run_id}/",
        rest_url=site.rest_url,
    )
    outbox = _outbox(tmp_path, run_id, dead_socket, rest_after_failures=2)
    outbox.start()
    for n in range(1200):
        outbox.emit(_beat(n))
    report = outbox.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(1200))
    assert site.connections == 0
    assert site.rest_posts >= 3 and site.max_batch <= 500  # chunks of at most 500
    assert (report.delivered, report.pending, report.used_rest) == (1200, 0, True)


def test_it_retries_rest_after_server_errors_and_unreadable_answers(tmp_path, run_id, site):
    site.rest_faults = [503, "<html>bad gateway</html>", '{"acked": "all"}']
    outbox = _outbox(tmp_path, run_id, site.endpoints(ws=False))
    outbox.start()
    for n in range(5):
        outbox.emit(_beat(n))
    report = outbox.close(drain_timeout=DRAIN)

    assert site.rest_faults == []  # each fault was met once, then it went on
    assert site.stored() == list(range(5))
    assert (report.delivered, report.pending, report.used_rest) == (5, 0, True)


def test_it_delivers_once_the_site_comes_back(tmp_path, run_id, site):
    site.stop()
    attempts = []
    default = websocket_connector(site.endpoints())

    async def counting_connect():
        try:
            return await default()
        except LinkDown:
            attempts.append("down")
            raise

    async def counting_request_epoch():  # the first thing a new spool needs from the site
        try:
            async with httpx.AsyncClient() as client:
                return await rest_request_epoch(client, site.endpoints())
        except LinkDown:
            attempts.append("down")
            raise

    outbox = _outbox(
        tmp_path,
        run_id,
        site.endpoints(),
        connect=counting_connect,
        request_epoch=counting_request_epoch,
    )
    outbox.start()
    for n in range(20):
        outbox.emit(_beat(n))
    _wait(lambda: len(attempts) >= 3)  # the site really was down while they were emitted
    site.start()
    report = outbox.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(20))
    assert (report.delivered, report.pending) == (20, 0)


def test_it_keeps_what_it_could_not_deliver_for_the_next_agent(tmp_path, run_id, site):
    site.stop()
    first = _outbox(tmp_path, run_id, site.endpoints())
    first.start()
    for n in range(5):
        first.emit(_beat(n))
    report = first.close(drain_timeout=0.3)

    assert (report.emitted, report.delivered, report.pending) == (5, 0, 5)
    assert [m["seq"] for m in Spool(tmp_path / "spool", run_id).pending()] == [0, 1, 2, 3, 4]

    site.start()
    second = _outbox(tmp_path, run_id, site.endpoints())  # the agent was restarted
    second.start()
    for n in range(5, 8):
        second.emit(_beat(n))
    report = second.close(drain_timeout=DRAIN)

    assert site.stored() == list(range(8))
    assert site.conflicts == []  # the new messages got new numbers
    assert [site.ledger[(1, seq)]["trial"] for seq in range(8)] == list(range(8))
    assert (report.emitted, report.delivered, report.pending) == (3, 8, 0)
    assert [m["seq"] for m in _journal(tmp_path)] == list(range(8))  # journaled once each


def test_it_never_resends_a_rejected_message(tmp_path, run_id, site):
    outbox = _outbox(tmp_path, run_id, site.endpoints())
    outbox.start()
    outbox.emit(_beat(0))
    outbox.emit(_beat(1, poison=True))
    site.wait_for(lambda: site.rejected)
    site.stop()  # a reconnect resends everything still pending
    site.start()
    outbox.emit(_beat(2))
    report = outbox.close(drain_timeout=DRAIN)

    assert site.stored() == [0, 2]
    assert site.receipts[1] == 1
    assert [r["seq"] for r in report.rejected] == [1]
    assert "poison" in report.rejected[0]["reason"]
    assert (report.delivered, report.pending) == (2, 0)
    assert Spool(tmp_path / "spool", run_id).pending() == []


def test_it_ignores_frames_it_cannot_read(tmp_path, run_id, site, caplog):
    outbox = _outbox(tmp_path, run_id, site.endpoints())
    outbox.start()
    outbox.emit(_beat(0))
    site.wait_for(lambda: site.stored() == [0])
    site.push_raw("not json")
    site.push_raw('{"type": "ack", "seq": "1"}')
    outbox.emit(_beat(1))
    report = outbox.close(drain_timeout=DRAIN)

    assert (report.delivered, report.pending) == (2, 0)
    assert caplog.text.count("ignored a frame from the site") == 2


def test_it_calls_on_cancel_once_for_a_socket_cancel(tmp_path, run_id, site):
    cancels = Recorder()
    outbox = _outbox(tmp_path, run_id, site.endpoints(), on_cancel=cancels)
    outbox.start()
    outbox.emit(_beat(0))
    site.wait_for(lambda: site.stored() == [0])
    site.push_cancel("budget reached")
    site.push_cancel("said twice")
    assert cancels.called.wait(10)
    outbox.emit(_beat(1))  # its ack follows both cancels on the same socket
    report = outbox.close(drain_timeout=DRAIN)

    assert cancels.calls == ["budget reached"]
    assert (report.delivered, report.pending) == (2, 0)  # still delivers after a cancel


def test_it_calls_on_cancel_once_for_a_rest_cancel(tmp_path, run_id, site):
    site.rest_cancel = "user pressed stop"
    cancels = Recorder()
    outbox = _outbox(tmp_path, run_id, site.endpoints(ws=False), on_cancel=cancels)
    outbox.start()
    outbox.emit(_beat(0))
    site.wait_for(lambda: site.stored() == [0])
    outbox.emit(_beat(1))
    site.wait_for(lambda: site.stored() == [0, 1])
    report = outbox.close(drain_timeout=DRAIN)

    assert site.rest_posts >= 2
    assert cancels.calls == ["user pressed stop"]
    assert (report.delivered, report.pending, report.used_rest) == (2, 0, True)


def test_it_stops_delivering_when_the_socket_is_refused_with_4404(tmp_path, run_id, site):
    site.refuse = True
    refusals = Recorder()
    outbox = _outbox(tmp_path, run_id, site.endpoints(), on_refused=refusals)
    outbox.start()
    for n in range(3):
        outbox.emit(_beat(n))
    assert refusals.called.wait(10)
    started = time.monotonic()
    report = outbox.close(drain_timeout=30)

    assert time.monotonic() - started < 10  # no point waiting for the drain timeout
    assert refusals.calls == ["the site closed the socket with 4404"]
    assert site.connections == 2  # refused twice in a row, then no more attempts
    assert site.rest_posts == 0
    assert (report.delivered, report.pending) == (0, 3)
    assert len(Spool(tmp_path / "spool", run_id).pending()) == 3  # nothing deleted


def test_it_stops_delivering_when_the_token_is_refused(tmp_path, run_id, site):
    refusals = Recorder()
    wrong = site.endpoints(token="bsr_not_this_runs_token")
    outbox = _outbox(tmp_path, run_id, wrong, on_refused=refusals, rest_after_failures=1)
    outbox.start()
    outbox.emit(_beat(0))
    assert refusals.called.wait(10)
    report = outbox.close(drain_timeout=30)

    assert len(refusals.calls) == 1
    assert "HTTP 40" in refusals.calls[0]  # 403 on the socket or 401 on REST, whichever first
    assert site.stored() == []
    assert (report.delivered, report.pending) == (0, 1)


def test_it_refuses_on_the_first_rest_refusal(tmp_path, run_id, site):
    refusals = Recorder()
    wrong = site.endpoints(token="bsr_not_this_runs_token", ws=False)
    outbox = _outbox(tmp_path, run_id, wrong, on_refused=refusals)
    outbox.start()
    outbox.emit(_beat(0))
    report = outbox.close(drain_timeout=30)

    # A new spool's first request is for its epoch.
    assert refusals.calls == ["the site refused the epoch request with HTTP 401"]
    assert report.pending == 1


def test_it_numbers_messages_from_many_threads_uniquely(tmp_path, run_id, site):
    outbox = _outbox(tmp_path, run_id, site.endpoints())
    outbox.start()
    threads, per_thread = 4, 250
    barrier = threading.Barrier(threads)

    def emitter(t: int) -> None:
        barrier.wait()
        for n in range(per_thread):
            outbox.emit(_beat(t * per_thread + n))

    workers = [threading.Thread(target=emitter, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    report = outbox.close(drain_timeout=DRAIN)

    total = threads * per_thread
    assert site.stored() == list(range(total))
    assert sorted(m["trial"] for m in site.ledger.values()) == list(range(total))
    assert [m["seq"] for m in _journal(tmp_path)] == list(range(total))
    assert (report.emitted, report.delivered, report.pending) == (total, total, 0)


def test_it_never_reveals_the_token(tmp_path, run_id, site, caplog):
    caplog.set_level(logging.DEBUG)
    site.cut_after = 3
    endpoints = site.endpoints()
    outbox = _outbox(tmp_path, run_id, endpoints, on_cancel=lambda reason: None)
    outbox.start()
    for n in range(10):
        outbox.emit(_beat(n, poison=True) if n == 4 else _beat(n))
    site.wait_for(lambda: len(site.ledger) == 9)
    site.push_cancel("stop")
    report = outbox.close(drain_timeout=DRAIN)
    wrong = Outbox(
        run_id=run_id,
        spool_dir=tmp_path / "other",
        site=site.endpoints(token="bsr_wrong_token_value"),
        backoff=FAST,
        rest_after_failures=1,
    )
    wrong.start()
    wrong.emit(_beat(0))
    wrong.close(drain_timeout=0.5)

    assert "[run token]" in caplog.text  # the header was logged, redacted
    assert "Bearer" in caplog.text
    for secret in (TOKEN, "bsr_wrong_token_value"):
        assert secret not in caplog.text
    assert TOKEN not in (tmp_path / "journal.jsonl").read_text()
    assert all(TOKEN not in p.read_text() for p in (tmp_path / "spool").iterdir())
    assert TOKEN not in repr(endpoints) and TOKEN not in str(endpoints)
    assert TOKEN not in repr(report)


def test_it_keeps_a_results_folder_without_a_site(tmp_path, run_id):
    journal = tmp_path / "journal.jsonl"
    # An earlier agent spooled two messages and crashed before journaling them.
    crashed = Spool(tmp_path / "spool", run_id)
    crashed.append({"protocol": 1, "type": "heartbeat", "trial": 0})
    crashed.append({"protocol": 1, "type": "heartbeat", "trial": 1})

    outbox = Outbox(run_id=run_id, spool_dir=tmp_path / "spool", journal_path=journal)
    outbox.emit(_beat(2))  # before start: queued, not lost
    outbox.start()
    outbox.emit(_beat(3))
    report = outbox.close(drain_timeout=0)

    assert (report.emitted, report.delivered, report.pending) == (2, 0, 0)
    assert [(m["seq"], m["trial"]) for m in _journal(tmp_path)] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert Spool(tmp_path / "spool", run_id).pending() == []

    again = Outbox(run_id=run_id, spool_dir=tmp_path / "spool", journal_path=journal)
    again.start()
    again.emit(_beat(4))
    again.close(drain_timeout=0)
    assert [m["seq"] for m in _journal(tmp_path)] == [0, 1, 2, 3, 4]  # never reused


def test_it_drops_only_what_is_not_json_and_says_so(tmp_path, run_id):
    outbox = Outbox(
        run_id=run_id, spool_dir=tmp_path / "spool", journal_path=tmp_path / "journal.jsonl"
    )
    outbox.start()
    outbox.emit(_beat(0))
    outbox.emit({"type": "heartbeat", "when": object()})
    outbox.emit(_beat(1))
    report = outbox.close(drain_timeout=0)

    assert [m["trial"] for m in _journal(tmp_path)] == [0, 1]
    assert [m["seq"] for m in _journal(tmp_path)] == [0, 1]  # no gap for the dropped one
    assert report.emitted == 2
    assert report.rejected[0]["seq"] is None
    assert "not JSON" in report.rejected[0]["reason"]


def test_it_refuses_emit_after_close_and_when_the_disk_failed(tmp_path, run_id, monkeypatch):
    outbox = Outbox(run_id=run_id, spool_dir=tmp_path / "spool")
    outbox.start()
    outbox.emit(_beat(0))
    assert outbox.close(drain_timeout=0).emitted == 1
    with pytest.raises(RuntimeError):
        outbox.emit(_beat(1))

    broken = Outbox(run_id=run_id, spool_dir=tmp_path / "spool")
    broken.start()

    def disk_full(self, messages):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Spool, "append_many", disk_full)
    broken.emit(_beat(1))
    with pytest.raises(OutboxBroken, match="No space left") as raised:
        broken.close(drain_timeout=0)
    assert raised.value.report is not None and raised.value.report.emitted == 0


def test_it_still_delivers_when_the_journal_cannot_be_written(tmp_path, run_id, site, monkeypatch):
    def disk_full(path, texts):
        raise OSError(28, "No space left on device")

    # The journal only: the spool writes through its own module's name.
    monkeypatch.setattr("agents.runner.outbox.append_lines_durably", disk_full)
    outbox = _outbox(tmp_path, run_id, site.endpoints())
    outbox.start()
    outbox.emit(_beat(0))
    with pytest.raises(OutboxBroken, match="No space left") as raised:
        outbox.close(drain_timeout=DRAIN)

    assert site.stored() == [0]  # spooled, so delivered; only the agent's record is short
    assert raised.value.report.delivered == 1


def test_it_keeps_its_epoch_on_its_spool_and_a_new_spool_starts_a_new_one(tmp_path, run_id, site):
    def deliver(spool: str, beats: range):
        outbox = _outbox(
            tmp_path,
            run_id,
            site.endpoints(),
            spool_dir=tmp_path / spool,
            journal_path=tmp_path / f"{spool}.jsonl",
        )
        outbox.start()
        for n in beats:
            outbox.emit(_beat(n))
        return outbox.close(drain_timeout=DRAIN)

    assert deliver("pod-1", range(3)).epoch == 1
    assert deliver("pod-1", range(3, 5)).epoch == 1  # resumed on its spool: same space
    assert deliver("pod-2", range(5, 8)).epoch == 2  # a fresh disk: a space of its own

    assert site.epochs_issued == 2 and site.conflicts == []
    assert sorted(site.ledger) == [(1, 0), (1, 1), (1, 2), (1, 3), (1, 4), (2, 0), (2, 1), (2, 2)]
    assert [site.ledger[key]["trial"] for key in sorted(site.ledger)] == list(range(8))
    assert Spool(tmp_path / "pod-1", run_id).epoch == 1
