"""How the outbox cuts its pending messages into batches (REST requests and array frames):
within the protocol's batch limits, which every site accepts (a larger body is answered 413)."""

from __future__ import annotations

import json

from agents import protocol
from agents.runner.delivery_ledger import MAX_DELIVERY_BATCH, delivery_batch


def _pending(count: int, size: int) -> dict[int, str]:
    return {seq: json.dumps({"seq": seq, "log_tail": "x" * size}) for seq in range(count)}


def _body_bytes(batch: list[tuple[int, str]]) -> int:
    # Exactly as site_link.rest_post_batch splices them.
    return len(('{"messages":[' + ",".join(text for _, text in batch) + "]}").encode())


def test_it_takes_the_oldest_messages_up_to_the_count_limit():
    batch = delivery_batch(_pending(MAX_DELIVERY_BATCH + 10, 10).items())
    assert [seq for seq, _ in batch] == list(range(MAX_DELIVERY_BATCH))


def test_it_stops_before_the_batch_outgrows_the_protocols_byte_limit():
    # Log tails as long as the protocol allows: far fewer than 500 fit into one batch.
    pending = _pending(200, protocol.MAX_LOG_TAIL_CHARS)
    batch = delivery_batch(pending.items())
    assert 1 < len(batch) < 200
    assert [seq for seq, _ in batch] == list(range(len(batch)))
    assert _body_bytes(batch) <= protocol.MAX_BATCH_BYTES + 64
    one_more = [*batch, (len(batch), pending[len(batch)])]
    assert _body_bytes(one_more) > protocol.MAX_BATCH_BYTES


def test_it_sends_a_message_larger_than_a_batch_alone():
    pending = _pending(3, protocol.MAX_BATCH_BYTES + 1)
    assert [seq for seq, _ in delivery_batch(pending.items())] == [0]
