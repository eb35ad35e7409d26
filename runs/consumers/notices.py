"""What the sockets are told, and the channel-layer groups they listen in.

- A run's browsers (``run_group``) get a compact notice of each agent message stored, and
  one without content when a message was refused as a conflict; the live page draws the
  notice and re-reads REST for the full picture.
- A run's agent sockets (``agent_run_group``) get its cancel request.

Guarantees: callers send only what has committed (the ingest socket and the REST batch
after ``agent_messages_ingest`` returns; ``run_cancel`` on its commit). A notice that is
lost costs nothing and is never raised to its caller: a browser re-reads REST on
(re)connect, an agent learns of a cancel when its socket (re)connects and in every REST
batch answer. A conflict's notice carries neither copy's content.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from agents import protocol

logger = logging.getLogger(__name__)


class Ingested(Protocol):
    """What a notice is made of: one message's ingest outcome
    (``runs.services.ingest.IngestOutcome``)."""

    @property
    def conflict(self) -> bool: ...  # refused: its (epoch, seq) holds other content
    @property
    def message(self) -> protocol.AgentMessage | None: ...  # stored now
    @property
    def payload(self) -> dict | None: ...  # stored now: the message's JSON form


def run_group(run_id) -> str:
    """The channel-layer group of browsers watching one run."""
    return f"run-{run_id}"


def agent_run_group(run_id) -> str:
    """The channel-layer group of the agent sockets of one run."""
    return f"agent-run-{run_id}"


# The LevelResult fields of a measurement's notice (those the agent sent): what the live
# page charts (p50 and p99 of TTFT, ITL and TPOT, throughput), its counts and the label.
_NOTICE_RESULT_FIELDS = {
    *(
        protocol.latency_field(statistic, metric)
        for statistic in ("median", "p99")
        for metric in ("ttft", "itl", "tpot")
    ),
    protocol.LEVEL_RESULT_KEY.output_throughput,
    protocol.LEVEL_RESULT_KEY.completed,
    protocol.LEVEL_RESULT_KEY.failed,
    protocol.LEVEL_RESULT_KEY.simulated,
}


# The message fields a notice carries, where the message has them.
_NOTICE_FIELDS = (
    "trial",
    "level",
    "requests_done",
    "requests_total",
    "outcome",
    "phase",
    "seconds",
    "ttft_ms_p99",
    "itl_ms_p99",
    "output_tokens_per_s",
    "kv_cache_usage",
    "num_requests_waiting",
    "failure_class",
    "sent_at",
)


def run_notice(outcome: Ingested) -> dict | None:
    """The live page's notice of one ingested message: of a message stored now, or of a
    conflict (the page re-reads the run and warns); None for anything else."""
    if outcome.conflict:
        return {"kind": "agent_conflict"}
    if outcome.message is None or outcome.payload is None:
        return None
    return _stored_notice(outcome.message, outcome.payload)


def _stored_notice(message, payload: dict) -> dict:
    """A compact notice for the live page; the page re-reads REST for the full picture.
    (epoch, seq) names the stored message: a restarted agent's seqs start at 0 again."""
    notice = {"kind": message.type, "epoch": message.epoch, "seq": message.seq}
    for field in _NOTICE_FIELDS:
        # Read off the message's JSON form: a model's attribute lookup, missing fields
        # included, cost more than the rest of the notice.
        value = payload.get(field)
        if isinstance(value, dict):  # the level: its fields that are set
            value = {key: item for key, item in value.items() if item is not None}
        if value is not None:
            notice[field] = value
    if isinstance(message, protocol.MeasurementReport):
        # Every figure the page charts (p50 and p99, throughput) and the simulator's label:
        # a level's point is drawn from its notice, without re-reading the run.
        result = payload["result"]
        notice["result"] = {key: result[key] for key in _NOTICE_RESULT_FIELDS if key in result}
    return notice


def _notices(outcomes: Iterable[Ingested]) -> list[dict]:
    return [notice for notice in map(run_notice, outcomes) if notice is not None]


def notify_run_watchers(run_id, outcomes: Iterable[Ingested]) -> None:
    """Sends the notices of committed ``outcomes`` to the run's browsers (from sync code)."""
    notices = _notices(outcomes)
    if notices:
        async_to_sync(_send_notices)(run_id, notices)


async def anotify_run_watchers(run_id, outcomes: Iterable[Ingested]) -> None:
    """The same, from async code (the ingest socket)."""
    await _send_notices(run_id, _notices(outcomes))


async def _send_notices(run_id, notices: list[dict]) -> None:
    layer = get_channel_layer()
    if layer is None or not notices:
        return
    try:
        # One channel-layer message per batch; the browser's consumer unpacks it.
        await layer.group_send(run_group(run_id), {"type": "run.updates", "updates": notices})
    except Exception:  # the stored fact is what counts; a lost notice is re-read via REST
        logger.warning("could not notify browsers of run %s", run_id, exc_info=True)


def agent_cancel_notify(run_id, reason: str) -> None:
    """Tells the run's connected agent sockets to cancel, with ``reason`` (call it once the
    request has committed)."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            agent_run_group(run_id), {"type": "agent.cancel", "reason": reason}
        )
    except Exception:  # the request is stored; the agent reads it on reconnect or via REST
        logger.warning("could not tell the agent of run %s to cancel", run_id, exc_info=True)
