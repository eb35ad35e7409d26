"""The agent's on-disk spool: nothing unacknowledged is lost, no sequence number repeats."""

from __future__ import annotations

import uuid

from agents import protocol
from agents.spool import MESSAGES, Spool

RUN = uuid.uuid4()


def _heartbeat() -> dict:
    return {"type": "heartbeat"}


def test_it_numbers_messages_in_order_for_the_run(tmp_path):
    spool = Spool(tmp_path, RUN)
    first, second = spool.append(_heartbeat()), spool.append(_heartbeat())
    assert (first["seq"], second["seq"]) == (0, 1)
    assert first["run_id"] == str(RUN)
    # What the spool holds is a valid protocol message.
    assert isinstance(protocol.parse_agent_message(first), protocol.Heartbeat)


def test_it_keeps_unacknowledged_messages_across_a_restart(tmp_path):
    spool = Spool(tmp_path, RUN)
    for _ in range(5):
        spool.append(_heartbeat())
    spool.ack(1)
    spool.ack(3)
    again = Spool(tmp_path, RUN)  # the agent process was restarted
    assert [m["seq"] for m in again.pending()] == [0, 2, 4]
    assert again.append(_heartbeat())["seq"] == 5  # never reuses a number


def test_it_treats_duplicate_and_unknown_acks_as_harmless(tmp_path):
    spool = Spool(tmp_path, RUN)
    spool.append(_heartbeat())
    spool.ack(0)
    spool.ack(0)
    spool.ack(99)
    assert spool.pending() == []
    assert Spool(tmp_path, RUN).pending() == []


def test_it_ignores_a_line_torn_by_a_crash(tmp_path):
    spool = Spool(tmp_path, RUN)
    spool.append(_heartbeat())
    with (tmp_path / MESSAGES).open("a") as file:
        file.write('{"type": "heartbeat", "seq": 1, "run_')  # the crash hit mid-write
    again = Spool(tmp_path, RUN)
    assert [m["seq"] for m in again.pending()] == [0]
    assert again.append(_heartbeat())["seq"] == 1


def test_it_compacts_without_losing_pending_messages_or_the_counter(tmp_path):
    spool = Spool(tmp_path, RUN)
    for _ in range(4):
        spool.append(_heartbeat())
    for seq in (0, 1, 2, 3):
        spool.ack(seq)
    spool.append(_heartbeat())
    spool.compact()
    assert [m["seq"] for m in spool.pending()] == [4]
    again = Spool(tmp_path, RUN)  # after a restart
    assert [m["seq"] for m in again.pending()] == [4]
    again.ack(4)
    again.compact()  # nothing left on disk but the counter
    assert Spool(tmp_path, RUN).append(_heartbeat())["seq"] == 5
