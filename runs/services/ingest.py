"""Storing what agents report.

Guarantees of ``agent_messages_ingest``:
- each (run, seq) is applied once: a resent message is acknowledged and changes nothing;
- a batch is stored together with everything it implies (trials, measurements, run state)
  in one transaction; callers notify the run's browsers after it has committed;
- a run that has ended accepts, for ``BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS`` after its
  end, what its agent still delivers (a spool it could not send while the site was down):
  levels, cold-start phases and trial outcomes are stored, its trials settled again and its
  kept level figures derived again, in the same transaction; its state, end time and reason
  never change. After the grace it accepts nothing new (a resend of a stored message is
  still acked);
- the run reaches its final state once ``run_finished`` and every message before it have
  arrived (resends after a reconnect may fill gaps in any order), its trials settled in the
  same transaction (``runs.services.trial_settling``); an agent that stopped as cancelled
  when nobody asked (its pod was stopped from outside) leaves the run ``failed``.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import protocol
from runs.models import AgentMessageRecord, Measurement, Run, Trial, TrialLevelFigures
from runs.models.runs import TERMINAL_RUN_STATES, RunState, TrialOutcome
from runs.report_figures import trial_level_figures_record
from runs.services.run_tokens import run_delivery_open
from runs.services.trial_settling import run_trials_settle

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
    """What became of one message: stored now, stored before (a resend), or refused."""

    seq: int
    stored: bool  # False: this (run, seq) was stored before (or refused), nothing changed
    refused: str | None = None  # why it will never be stored
    update: dict | None = None  # the notice for the run's watchers, when stored now


def agent_messages_ingest(*, run_id, messages: list) -> list[IngestOutcome]:
    """Applies validated messages of one run in order, in ONE transaction (one commit for
    the batch: a commit's disk flush, not the message, is what costs). Returns an outcome per
    message, in order. Notify the run's watchers with ``notify_run_watchers`` afterwards."""
    try:
        with transaction.atomic():
            return _ingest_batch(run_id, messages)
    except IntegrityError:
        # Another connection of the same run stored one of these seqs at the same moment
        # (an agent that reconnected while its old socket still drained): go one by one.
        if len(messages) == 1:
            if AgentMessageRecord.objects.filter(run_id=run_id, seq=messages[0].seq).exists():
                return [IngestOutcome(seq=messages[0].seq, stored=False)]
            raise
        return [
            outcome
            for m in messages
            for outcome in agent_messages_ingest(run_id=run_id, messages=[m])
        ]


def _ingest_batch(run_id, messages: list) -> list[IngestOutcome]:
    run = Run.objects.select_for_update().get(pk=run_id)
    seen = set(
        AgentMessageRecord.objects.filter(run=run, seq__in=[m.seq for m in messages]).values_list(
            "seq", flat=True
        )
    )
    outcomes, changed, trials = [], set(), {}
    late = False  # whether a message was stored for a run that had ended
    for message in messages:
        if message.seq in seen:
            outcomes.append(IngestOutcome(seq=message.seq, stored=False))  # a resend: ack again
            continue
        ended = run.state in TERMINAL_RUN_STATES
        if ended and not run_delivery_open(run):
            reason = f"Run {run.id} has ended ({run.state}); nothing more is accepted."
            outcomes.append(IngestOutcome(seq=message.seq, stored=False, refused=reason))
            continue
        AgentMessageRecord.objects.create(
            run=run, seq=message.seq, type=message.type, payload=message.model_dump(mode="json")
        )
        seen.add(message.seq)
        late = late or ended
        changed.update(_apply(run, message, trials))
        # An ended run's end stands: a late run_finished is kept in the ledger, nothing more.
        if not ended and (message.type == "run_finished" or run.state == RunState.FINALIZING):
            run.save(update_fields=changed)
            _finish_if_complete(run)
        outcomes.append(
            IngestOutcome(seq=message.seq, stored=True, update=_browser_update(message))
        )
    if changed:
        run.save(update_fields=changed)
    if late and trials:
        # Late levels or outcomes of an ended run: the same rule as at its end, and the
        # figures kept for the reports derived from every level it now has.
        run_trials_settle(run=run, reason=run.failure_reason)
        TrialLevelFigures.objects.filter(trial__run=run).delete()
        trial_level_figures_record(run_ids=[run.id])
    return outcomes


def _trial(run: Run, index: int, trials: dict[int, Trial]) -> Trial:
    # Messages of a trial may be replayed out of order after a reconnect: create on first
    # sight. ``trials`` caches them for the batch: most messages of a batch share a trial.
    if index not in trials:
        trials[index], _ = Trial.objects.get_or_create(
            run=run, index=index, defaults={"serve_config": {}}
        )
    return trials[index]


def _apply(run: Run, message, trials: dict[int, Trial]) -> list[str]:
    """Applies one message to its rows; returns the run's fields it changed (saved once per
    batch by the caller)."""
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
        trial = _trial(run, message.trial, trials)
        trial.serve_config, trial.command = message.serve_config, message.command
        trial.outcome, trial.started_at = TrialOutcome.RUNNING, trial.started_at or now
        trial.save(update_fields=["serve_config", "command", "outcome", "started_at"])
        if run.state in _EARLY_STATES:
            run.state = RunState.BENCHMARKING
            run.started_at = run.started_at or now
            fields += ["state", "started_at"]
    elif isinstance(message, protocol.ColdStartPhase):
        trial = _trial(run, message.trial, trials)
        trial.cold_start = {**trial.cold_start, message.phase: message.seconds}
        trial.save(update_fields=["cold_start"])
    elif isinstance(message, protocol.MeasurementReport):
        rate = message.level.request_rate
        Measurement.objects.create(
            trial=_trial(run, message.trial, trials),
            concurrency=message.level.concurrency,
            request_rate=None if rate in (None, "inf") else rate,
            request_rate_infinite=rate == "inf",
            result=message.result,
            server_metrics=message.server,
        )
    elif isinstance(message, protocol.TrialFinished):
        trial = _trial(run, message.trial, trials)
        trial.outcome = message.outcome
        trial.failure_class = message.failure_class or ""
        trial.log_tail = message.log_tail
        trial.finished_at = now
        trial.save(update_fields=["outcome", "failure_class", "log_tail", "finished_at"])
    return fields


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
    elif outcome == "cancelled" and run.cancel_requested_at is None:
        # Nobody here asked: the pod was stopped from outside (Runpod, its console, a host
        # going down) and the agent said so on its way out. That is a failure, not a cancel.
        said = finished.payload.get("reason") or "the agent gave no reason"
        run.state = RunState.FAILED
        run.failure_reason = f"The pod stopped before the run finished ({said})."
    elif finished.payload.get("reason"):
        run.failure_reason = finished.payload["reason"]
    run.save(update_fields=["state", "finished_at", "failure_reason"])
    run_trials_settle(run=run, reason=run.failure_reason)
    # The pod is given back as soon as the run is over (reconcile catches a lost task).
    transaction.on_commit(functools.partial(_enqueue_finalize, run.id))


def _enqueue_finalize(run_id) -> None:
    from runs.tasks import run_finalize  # the task module imports services

    try:
        run_finalize.delay(str(run_id))
    except Exception:  # a broker hiccup must not lose the stored messages; reconcile retries
        logger.warning("could not enqueue finalizing run %s", run_id, exc_info=True)


_NOTICE_RESULT_KEYS = (
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "output_throughput",
    "completed",
    "failed",
    "simulated",
)


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
        # Every figure the page charts (p50 and p99, throughput) and the simulator's label:
        # a level's point is drawn from its notice, without re-reading the run.
        update["result"] = {
            key: message.result[key] for key in _NOTICE_RESULT_KEYS if key in message.result
        }
    return update


def notify_run_watchers(run_id, outcomes: list[IngestOutcome]) -> None:
    """Sends the notices of freshly stored messages to the run's browsers (from sync code).
    A lost notice costs nothing: the page re-reads REST."""
    updates = [outcome.update for outcome in outcomes if outcome.update is not None]
    if updates:
        async_to_sync(anotify_run_watchers)(run_id, updates)


async def anotify_run_watchers(run_id, updates: list[dict]) -> None:
    """The same, from async code (the ingest consumer)."""
    layer = get_channel_layer()
    if layer is None or not updates:
        return
    try:
        # One channel-layer message per batch; the browser consumer unpacks it.
        await layer.group_send(run_group(run_id), {"type": "run.updates", "updates": updates})
    except Exception:  # the stored fact is what counts; a lost notice is re-read via REST
        logger.warning("could not notify browsers of run %s", run_id, exc_info=True)
