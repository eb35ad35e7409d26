"""Ingest in batches (issue 20, scale): what arrived together is stored in one transaction
whose statements do not grow with the batch, acknowledged only after its commit, with
duplicates dropped and a bad message refused on its own."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext

from agents import protocol
from runs.consumers import sockets as consumers
from runs.models import AgentMessageRecord, Measurement
from runs.services import pending_rows
from runs.services.ingest import agent_messages_ingest

from .test_agent_ingest import (
    RESULT,
    _agent_client,
    _agent_socket,
    _new_run,
    _stored_counts,
    messages,
)

pytestmark = pytest.mark.django_db(transaction=True)


def _measurements(run_id, seqs) -> list[dict]:
    level = messages(run_id)[4]
    return [level | {"seq": seq, "level": {"concurrency": 1 + seq}} for seq in seqs]


def _parsed(contents) -> list:
    return [protocol.parse_agent_message(content) for content in contents]


def _ingest_counted(run, contents) -> tuple[list, list[str]]:
    """The outcomes of one batch and the SQL it ran (COMMIT included)."""
    with CaptureQueriesContext(connection) as queries:
        outcomes = agent_messages_ingest(run_id=run.id, messages=_parsed(contents))
    return outcomes, [query["sql"] for query in queries]


def _statement_kinds(sql: list[str]) -> list[str]:
    return [statement.split()[0] for statement in sql]


def test_it_stores_a_batch_in_one_transaction_whose_statements_do_not_grow_with_it(alice):
    run, _ = _new_run(alice.org)
    agent_messages_ingest(run_id=run.id, messages=_parsed(messages(run.id)[:2]))  # its trial
    _, one = _ingest_counted(run, _measurements(run.id, [2]))
    _, forty = _ingest_counted(run, _measurements(run.id, range(3, 43)))
    assert _statement_kinds(forty) == _statement_kinds(one)
    assert _statement_kinds(forty).count("COMMIT") == 1
    assert _statement_kinds(forty).count("COPY") == 2  # the ledger's rows, the measurements
    assert AgentMessageRecord.objects.filter(run=run).count() == 43
    stored = Measurement.objects.filter(trial__run=run).order_by("id")
    assert [m.concurrency for m in stored] == list(range(3, 44))  # in the order they came
    assert all(m.result == RESULT for m in stored)


def test_it_reads_the_trials_a_batch_names_in_one_statement_however_many(alice):
    run, _ = _new_run(alice.org)
    whole = messages(run.id)
    started = [whole[1] | {"seq": 1 + index, "trial": index} for index in range(3)]
    agent_messages_ingest(run_id=run.id, messages=_parsed([whole[0], *started]))
    level = _measurements(run.id, [10])[0]
    _, one_trial = _ingest_counted(run, [level])
    _, three_trials = _ingest_counted(
        run, [level | {"seq": 11 + index, "trial": index} for index in range(3)]
    )
    assert _statement_kinds(three_trials) == _statement_kinds(one_trial)
    stored = Measurement.objects.filter(trial__run=run).values_list("trial__index", flat=True)
    assert sorted(stored) == [0, 0, 1, 2]


def test_it_drops_duplicates_inside_a_batch_and_across_batches_and_acks_them(alice):
    run, _ = _new_run(alice.org)
    hello, started = messages(run.id)[:2]
    level_2, level_3 = _measurements(run.id, [2, 3])
    outcomes, _ = _ingest_counted(run, [hello, started, level_2, started, level_2])
    assert [(o.seq, o.stored, o.refused) for o in outcomes] == [
        (0, True, None),
        (1, True, None),
        (2, True, None),
        (1, False, None),  # acknowledged again, stored once
        (2, False, None),
    ]
    outcomes, _ = _ingest_counted(run, [level_2, level_3, hello])
    assert [(o.seq, o.stored, o.refused) for o in outcomes] == [
        (2, False, None),
        (3, True, None),
        (0, False, None),
    ]
    assert sorted(AgentMessageRecord.objects.filter(run=run).values_list("seq", flat=True)) == [
        0,
        1,
        2,
        3,
    ]
    assert Measurement.objects.filter(trial__run=run).count() == 2


def test_it_refuses_a_conflict_inside_a_batch_by_name_and_stores_the_others(alice):
    run, _ = _new_run(alice.org)
    hello, started = messages(run.id)[:2]
    level_2, level_3 = _measurements(run.id, [2, 3])
    forged = level_2 | {"result": RESULT | {"completed": 1}}
    outcomes, sql = _ingest_counted(run, [hello, started, level_2, forged, level_3])
    refused = [(o.seq, o.refused) for o in outcomes if o.refused]
    assert len(refused) == 1 and refused[0][0] == 2
    assert refused[0][1].startswith("conflict: epoch 0, seq 2 is stored with other content")
    assert [o.seq for o in outcomes if o.stored] == [0, 1, 2, 3]
    assert _statement_kinds(sql).count("COMMIT") == 1
    assert Measurement.objects.filter(trial__run=run).count() == 2
    run.refresh_from_db()
    assert run.agent_conflicts == 1


async def test_it_writes_what_queued_up_meanwhile_in_one_transaction_and_acks_after_it(
    alice, monkeypatch
):
    """The writer is held in its first batch's write: frames arriving meanwhile queue up, get
    no ack (nothing of them is committed), and go in the next batch, one transaction."""
    batches: list[list[int]] = []
    commits: list[int] = []
    release = asyncio.Event()

    def counted(*, run_id, messages):
        with CaptureQueriesContext(connection) as queries:
            outcomes = agent_messages_ingest(run_id=run_id, messages=messages)
        batches.append([message.seq for message in messages])
        commits.append(sum(query["sql"] == "COMMIT" for query in queries))
        return outcomes

    write = database_sync_to_async(counted, thread_sensitive=False)

    async def held_ingest(**kwargs):
        await release.wait()
        return await write(**kwargs)

    monkeypatch.setattr(consumers.AgentIngestConsumer, "_ingest", staticmethod(held_ingest))
    run, token = await sync_to_async(_new_run)(alice.org)
    socket = await _agent_socket(run.id, token)
    assert (await socket.connect(timeout=10))[0]
    sent = messages(run.id)
    for message in sent[:6]:
        await socket.send_json_to(message)
    assert await socket.receive_nothing(timeout=0.5)  # nothing committed, nothing acked
    release.set()
    acks = [await socket.receive_json_from(timeout=10) for _ in range(6)]
    await socket.disconnect()
    assert acks == [{"type": "ack", "seq": seq} for seq in range(6)]
    assert batches == [[0], [1, 2, 3, 4, 5]]
    assert commits == [1, 1]
    assert await _stored_counts(run) == (6, 1, 1)


async def test_it_acks_nothing_of_a_batch_whose_transaction_rolled_back(alice, monkeypatch):
    """The write fails after the batch's rows went in: the transaction rolls back, the socket
    closes unacknowledged, and the agent's resend stores everything once."""
    real_flush = pending_rows.PendingRows.flush

    def failing_flush(self):
        real_flush(self)
        raise OperationalError("the database went away after the insert")

    monkeypatch.setattr(pending_rows.PendingRows, "flush", failing_flush)
    run, token = await sync_to_async(_new_run)(alice.org)
    sent = messages(run.id)[:5]
    socket = await _agent_socket(run.id, token)
    await socket.connect(timeout=10)
    for message in sent:
        await socket.send_json_to(message)
    # The first frame out is the close: no ack of anything the failed batch held.
    closed = await socket.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_INTERNAL_ERROR}
    await socket.disconnect()
    assert await _stored_counts(run) == (0, 0, 0)
    monkeypatch.undo()
    again = await _agent_socket(run.id, token)  # the agent reconnects and resends
    await again.connect(timeout=10)
    for message in sent:
        await again.send_json_to(message)
    acks = [await again.receive_json_from(timeout=10) for _ in sent]
    await again.disconnect()
    assert sorted(ack["seq"] for ack in acks) == [0, 1, 2, 3, 4]
    assert await _stored_counts(run) == (5, 1, 1)


async def test_it_refuses_a_bad_message_of_a_pipelined_batch_by_name_and_stores_the_rest(alice):
    run, token = await sync_to_async(_new_run)(alice.org)
    hello, started = messages(run.id)[:2]
    (level,) = _measurements(run.id, [3])
    broken = level | {"seq": 2, "result": {"completed": 1}}
    socket = await _agent_socket(run.id, token)
    await socket.connect(timeout=10)
    for message in (hello, started, broken, level):
        await socket.send_json_to(message)
    replies = [await socket.receive_json_from(timeout=10) for _ in range(4)]
    await socket.disconnect()
    assert sorted(r["seq"] for r in replies if r["type"] == "ack") == [0, 1, 3]
    (rejected,) = [r for r in replies if r["type"] == "rejected"]
    assert rejected["seq"] == 2 and "result" in rejected["reason"]
    assert await _stored_counts(run) == (3, 1, 1)


def test_it_stores_a_rest_batch_with_as_many_statements_as_one_message(alice):
    run, token = _new_run(alice.org)
    client = _agent_client(token)
    url = f"/api/v1/agent/runs/{run.id}/messages/"
    assert client.post(url, {"messages": messages(run.id)[:2]}, format="json").status_code == 200
    sql = {}
    for size, seqs in ((1, [2]), (50, range(3, 53))):
        with CaptureQueriesContext(connection) as queries:
            response = client.post(url, {"messages": _measurements(run.id, seqs)}, format="json")
        assert response.status_code == 200
        assert response.json()["acked"] == list(seqs)
        sql[size] = _statement_kinds([query["sql"] for query in queries])
    assert sql[50] == sql[1]
    assert sql[50].count("COMMIT") == 1
    assert Measurement.objects.filter(trial__run=run).count() == 51
