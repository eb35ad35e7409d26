"""Storing what agents report.

Guarantees of ``agent_message_ingest``:
- each (run, seq) is applied once: a resent message is acknowledged and changes nothing;
- a message is stored together with everything it implies (trial, measurement, run state)
  in one transaction, and the browsers watching the run are notified after it commits;
- a run that has ended accepts nothing new (a resend of a stored message is still acked);
- the run reaches its final state once ``run_finished`` and every message before it have
  arrived (resends after a reconnect may fill gaps in any order).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import protocol
from runs.errors import Conflict
from runs.models import AgentMessageRecord, Measurement, Run, Trial
from runs.models.runs import TERMINAL_RUN_STATES, RunState, TrialOutcome

logger = logging.getLogger(__name__)

_FINAL_STATE = {
    "succeeded": RunState.SUCCEEDED,
    "failed": RunState.FAILED,
    "cancelled": RunState.CANCELLED,
    "deadline": RunState.FAILED,
}
_EARLY_STATES = (RunState.QUEUED, RunState.PROVISIONING, RunState.STARTING)


def run_group(run_id) -> str:
    """The channel-layer group of browsers watching one run."""
    return f"run-{run_id}"


@dataclass(frozen=True)
class IngestOutcome:
    seq: int
    stored: bool  # False: this (run, seq) was stored before, nothing changed


def agent_message_ingest(*, run_id, message) -> IngestOutcome:
    """Applies one validated agent message (see the module docstring)."""
    try:
        with transaction.atomic():
            run = Run.objects.select_for_update().get(pk=run_id)
            if AgentMessageRecord.objects.filter(run=run, seq=message.seq).exists():
                return IngestOutcome(seq=message.seq, stored=False)  # a resend: ack again
            if run.state in TERMINAL_RUN_STATES:
                raise Conflict(f"Run {run.id} has ended ({run.state}); nothing more is accepted.")
            AgentMessageRecord.objects.create(
                run=run, seq=message.seq, type=message.type, payload=message.model_dump(mode="json")
            )
            _apply(run, message)
            _finish_if_complete(run)
            update = _browser_update(message)
            transaction.on_commit(lambda: _notify(run.id, update))
    except IntegrityError:
        if not AgentMessageRecord.objects.filter(run_id=run_id, seq=message.seq).exists():
            raise
        # The unique (run, seq) refused a second copy: the first one was applied in full.
        return IngestOutcome(seq=message.seq, stored=False)
    return IngestOutcome(seq=message.seq, stored=True)


def _trial(run: Run, index: int) -> Trial:
    # Messages of a trial may be replayed out of order after a reconnect: create on first sight.
    trial, _ = Trial.objects.get_or_create(run=run, index=index, defaults={"serve_config": {}})
    return trial


def _apply(run: Run, message) -> None:
    now = timezone.now()
    run.last_heartbeat_at = now
    fields = ["last_heartbeat_at"]
    if isinstance(message, protocol.Hello):
        run.agent_info = {"agent_version": message.agent_version, **message.host.model_dump()}
        fields.append("agent_info")
        if run.state in _EARLY_STATES:
            run.state = RunState.STARTING
            fields.append("state")
    elif isinstance(message, protocol.TrialStarted):
        trial = _trial(run, message.trial)
        trial.serve_config, trial.command = message.serve_config, message.command
        trial.outcome, trial.started_at = TrialOutcome.RUNNING, trial.started_at or now
        trial.save(update_fields=["serve_config", "command", "outcome", "started_at"])
        if run.state in _EARLY_STATES:
            run.state = RunState.BENCHMARKING
            run.started_at = run.started_at or now
            fields += ["state", "started_at"]
    elif isinstance(message, protocol.ColdStartPhase):
        trial = _trial(run, message.trial)
        trial.cold_start = {**trial.cold_start, message.phase: message.seconds}
        trial.save(update_fields=["cold_start"])
    elif isinstance(message, protocol.MeasurementReport):
        rate = message.level.request_rate
        Measurement.objects.create(
            trial=_trial(run, message.trial),
            concurrency=message.level.concurrency,
            request_rate=None if rate in (None, "inf") else rate,
            request_rate_infinite=rate == "inf",
            result=message.result,
            server_metrics=message.server,
        )
    elif isinstance(message, protocol.TrialFinished):
        trial = _trial(run, message.trial)
        trial.outcome = message.outcome
        trial.failure_class = message.failure_class or ""
        trial.log_tail = message.log_tail
        trial.finished_at = now
        trial.save(update_fields=["outcome", "failure_class", "log_tail", "finished_at"])
    run.save(update_fields=fields)


def _finish_if_complete(run: Run) -> None:
    finished = AgentMessageRecord.objects.filter(run=run, type="run_finished").first()
    if finished is None:
        return
    received = AgentMessageRecord.objects.filter(run=run, seq__lte=finished.seq).count()
    if received < finished.seq + 1:
        run.state = RunState.FINALIZING  # wait for the gaps to be resent
        run.save(update_fields=["state"])
        return
    outcome = finished.payload["outcome"]
    run.state = _FINAL_STATE[outcome]
    run.finished_at = timezone.now()
    if outcome == "deadline":
        run.failure_reason = "The agent stopped at the run's deadline; partial results kept."
    elif finished.payload.get("reason"):
        run.failure_reason = finished.payload["reason"]
    run.save(update_fields=["state", "finished_at", "failure_reason"])


def _browser_update(message) -> dict:
    """A compact notice for the live page; the page re-reads REST for the full picture."""
    update = {"kind": message.type, "seq": message.seq}
    for field in (
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
    ):
        value = getattr(message, field, None)
        if value is not None:
            update[field] = (
                value.model_dump(exclude_none=True) if hasattr(value, "model_dump") else value
            )
    if isinstance(message, protocol.MeasurementReport):
        keys = (
            "p99_ttft_ms",
            "p99_itl_ms",
            "p99_tpot_ms",
            "output_throughput",
            "completed",
            "failed",
        )
        update["result"] = {key: message.result[key] for key in keys if key in message.result}
    return update


def _notify(run_id, update: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(run_group(run_id), {"type": "run.update", "update": update})
    except Exception:  # the stored fact is what counts; a lost notice is re-read via REST
        logger.warning("could not notify browsers of run %s", run_id, exc_info=True)
