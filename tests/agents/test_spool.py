"""The agent's on-disk spool: nothing unacknowledged is lost, no sequence number repeats."""

from __future__ import annotations

import errno
import os
import uuid

import pytest

from agents import protocol
from agents.spool import ACKED, MESSAGES, Spool

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


def test_it_appends_a_batch_with_consecutive_numbers_durably(tmp_path):
    spool = Spool(tmp_path, RUN)
    spool.append(_heartbeat())
    batch = spool.append_many([{"type": "heartbeat", "trial": n} for n in range(3)])
    assert [m["seq"] for m in batch] == [1, 2, 3]
    assert [m["trial"] for m in batch] == [0, 1, 2]  # in the order given
    assert spool.append_many([]) == []
    again = Spool(tmp_path, RUN)  # what was returned is on disk
    assert [m["seq"] for m in again.pending()] == [0, 1, 2, 3]
    assert again.append(_heartbeat())["seq"] == 4


def test_it_numbers_nothing_when_a_batch_cannot_be_written(tmp_path, monkeypatch):
    spool = Spool(tmp_path, RUN)
    spool.append(_heartbeat())

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError):
        spool.append_many([_heartbeat(), _heartbeat()])
    monkeypatch.undo()
    assert [m["seq"] for m in spool.pending()] == [0]
    assert spool.append(_heartbeat())["seq"] == 1  # the number was not used up


def test_it_acknowledges_a_batch_ignoring_duplicates_and_unknown_numbers(tmp_path):
    spool = Spool(tmp_path, RUN)
    for _ in range(5):
        spool.append(_heartbeat())
    spool.ack(1)
    spool.ack_many([1, 3, 3, 0, 99])
    spool.ack_many([])
    assert [m["seq"] for m in spool.pending()] == [2, 4]
    assert (tmp_path / ACKED).read_text().split() == ["1", "0", "3"]  # each number once
    assert [m["seq"] for m in Spool(tmp_path, RUN).pending()] == [2, 4]


def test_it_keeps_its_epoch_across_reopening_and_compacting(tmp_path):
    spool = Spool(tmp_path, RUN)
    assert spool.epoch is None  # a new spool: the site has not issued one yet
    spool.append({"type": "heartbeat"})
    spool.set_epoch(3)
    spool.compact()
    again = Spool(tmp_path, RUN)
    assert (again.epoch, again.next_seq) == (3, 1)
    again.set_epoch(3)  # the same again is harmless
    with pytest.raises(ValueError, match="already sends in epoch 3"):
        again.set_epoch(4)
