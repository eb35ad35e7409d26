"""Storing what agents report.

Guarantees of ``agent_messages_ingest``:
- each (run, epoch, seq) is applied once: a resent message with the same content is
  acknowledged and changes nothing; one with other content is refused as a conflict (never
  acknowledged as stored), logged and counted on the run (``Run.agent_conflicts``); a message
  of an epoch the site never issued for the run is refused;
- a batch is stored together with everything it implies (trials, measurements, run state)
  in one transaction, its ledger rows and its measurements one statement each
  (``PendingRows``: a batch costs a handful of statements, not two per message); callers
  acknowledge it and notify the run's browsers (``runs.consumers.notices``, from the
  outcomes) only after it has committed;
- a run that has ended accepts, for ``BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS`` after its
  end, what its agent still delivers (a spool it could not send while the site was down):
  levels, cold-start phases and trial outcomes are stored, its trials settled again and its
  kept level figures derived again, in the same transaction; its state, end time and reason
  never change. After the grace it accepts nothing new (a resend of a stored message is
  still acked);
- the run's state moves by ``runs.services.run_lifecycle``: starting at the agent's hello,
  benchmarking at its first trial, and at its ``run_finished`` as
  ``runs.services.run_finish`` decides, in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from datetime import datetime

import orjson
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents import protocol
from runs.models import AgentMessageRecord, Measurement, Run, Trial, TrialLevelFigures
from runs.models.runs import TERMINAL_RUN_STATES, RunState, TrialOutcome
from runs.run_as_started import run_planned_trials
from runs.selectors.delivery import run_delivery_open
from runs.services.evaluation_runs import trial_evaluation_record
from runs.services.gpu_drivers import gpu_type_driver_seen
from runs.services.level_figures import trial_level_figures_record
from runs.services.pending_rows import JsonText, PendingRows
from runs.services.run_finish import run_finish_if_complete
from runs.services.run_lifecycle import run_transition
from runs.services.trial_settling import run_trials_settle

logger = logging.getLogger(__name__)

_EARLY_STATES = (RunState.QUEUED, RunState.PROVISIONING, RunState.STARTING)


@dataclass(frozen=True)
class IngestOutcome:
    """What became of one message: stored now, stored before (a resend), or refused."""

    seq: int
    stored: bool  # False: this (run, epoch, seq) was stored before (or refused), nothing changed
    refused: str | None = None  # why it will never be stored
    conflict: bool = False  # refused: its (epoch, seq) is stored with other content
    message: protocol.AgentMessage | None = None  # stored now: the message
    payload: dict | None = None  # stored now: its JSON form
    run_ended: bool = False  # refused because the run has ended: nothing more will be taken


def canonical_json(payload: dict) -> JsonText:
    """A validated message (its JSON form) as canonical JSON — keys sorted, no spaces, text
    as UTF-8: what its digest is of, and what is stored. Written by orjson, about ten times
    faster than the standard library; the two differ only in how a float with an exponent
    is spelled (``1e-05`` against ``0.00001``), so a message stored before orjson wrote its
    digest may have another digest now, and is then compared by value
    (``_same_as_stored``), as it always could be."""
    return _json_text(payload, sort_keys=True)


def _json_text(value, *, sort_keys: bool = False) -> JsonText:
    """A validated value (finite numbers only) as compact JSON, by orjson; an integer beyond
    64 bits, which orjson does not write, goes through the standard library."""
    try:
        option = orjson.OPT_SORT_KEYS if sort_keys else 0
        return JsonText(orjson.dumps(value, option=option).decode())
    except TypeError:
        return JsonText(
            json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)
        )


def message_digest(payload: dict, text: str | None = None) -> str:
    """The digest that tells a resend (same content) from a conflict: sha256 of the
    validated message as canonical JSON (``text``, when the caller has it already)."""
    text = canonical_json(payload) if text is None else text
    return hashlib.sha256(text.encode()).hexdigest()


def agent_messages_ingest(*, run_id, messages: list) -> list[IngestOutcome]:
    """Applies validated messages of one run in order, in ONE transaction (one commit for
    the batch: a commit's disk flush, not the message, is what costs). Returns an outcome per
    message, in order. Notify the run's watchers with them afterwards
    (``runs.consumers.notices.notify_run_watchers``)."""
    try:
        with transaction.atomic():
            return _ingest_batch(run_id, messages)
    except IntegrityError:
        # Another connection of the same run stored one of these seqs at the same moment
        # (an agent that reconnected while its old socket still drained): go one by one; a
        # second try sees the other copy and compares it like any resend.
        if len(messages) == 1:
            with transaction.atomic():
                return _ingest_batch(run_id, messages)
        return [
            outcome
            for m in messages
            for outcome in agent_messages_ingest(run_id=run_id, messages=[m])
        ]


def _ingest_batch(run_id, messages: list) -> list[IngestOutcome]:
    run = Run.objects.select_for_update().get(pk=run_id)
    keys = {(m.epoch, m.seq) for m in messages}
    stored = AgentMessageRecord.objects.filter(
        run=run, epoch__in={epoch for epoch, _ in keys}, seq__in={seq for _, seq in keys}
    ).values_list("epoch", "seq", "digest", "type")
    # (epoch, seq) → (digest, type) of what is stored under it.
    seen = {(e, s): (digest, kind) for e, s, digest, kind in stored if (e, s) in keys}
    outcomes, changed, trials = [], set(), _BatchTrials(run, messages)
    now = timezone.now()  # the batch's moment: its messages arrive and are applied together
    rows = PendingRows()  # this batch's ledger rows and measurements, inserted together
    late = False  # whether a message was stored for a run that had ended
    for message in messages:
        payload = message.model_dump(mode="json")
        text = canonical_json(payload)
        digest = message_digest(payload, text)
        key = (message.epoch, message.seq)
        if key in seen:
            if seen[key][0] not in ("", digest):
                rows.flush()  # the stored copy to compare with may be this batch's own
            # A resend: ack again. A row stored before digests were kept ("") is taken at
            # its word, as it always was.
            if seen[key][0] in ("", digest) or _same_as_stored(run, key, payload):
                outcomes.append(IngestOutcome(seq=message.seq, stored=False))
            else:
                outcomes.append(_conflict(run, message, seen[key][1], changed))
            continue
        if message.epoch < run.epoch_floor:
            reason = (
                f"epoch {message.epoch} belongs to a pod run {run.id} has left (it resumed on "
                f"a new pod); nothing more of it is accepted."
            )
            outcomes.append(IngestOutcome(seq=message.seq, stored=False, refused=reason))
            continue
        if message.epoch > run.agent_epoch:
            reason = (
                f"epoch {message.epoch} was never issued for run {run.id} (the last issued is "
                f"{run.agent_epoch}); an agent asks POST agent/runs/<id>/epoch/ for one."
            )
            outcomes.append(IngestOutcome(seq=message.seq, stored=False, refused=reason))
            continue
        ended = run.state in TERMINAL_RUN_STATES
        if ended and not run_delivery_open(run):
            reason = f"Run {run.id} has ended ({run.state}); nothing more is accepted."
            outcomes.append(
                IngestOutcome(seq=message.seq, stored=False, refused=reason, run_ended=True)
            )
            continue
        rows.add_values(
            AgentMessageRecord,
            organization_id=run.organization_id,
            run_id=run.id,
            epoch=message.epoch,
            seq=message.seq,
            type=message.type,
            payload=text,  # the same JSON, written once
            digest=digest,
            received_at=now,
        )
        seen[key] = (digest, message.type)
        late = late or ended
        changed.update(_apply(run, message, payload, trials, rows, now))
        # An ended run's end stands: a late run_finished is kept in the ledger, nothing more.
        if not ended and (message.type == "run_finished" or run.state == RunState.FINALIZING):
            rows.flush()  # whether the run is complete is counted on the stored rows
            run.save(update_fields=changed)
            run_finish_if_complete(run)
        outcomes.append(
            IngestOutcome(seq=message.seq, stored=True, message=message, payload=payload)
        )
    rows.flush()
    if changed:
        run.save(update_fields=changed)
    if late and trials.touched:
        # Late levels or outcomes of an ended run: the same rule as at its end, and the
        # figures kept for the reports derived from every level it now has.
        run_trials_settle(run=run, reason=run.failure_reason)
        TrialLevelFigures.objects.filter(trial__run=run).delete()
        trial_level_figures_record(run_ids=[run.id])
    return outcomes


def _same_as_stored(run: Run, key: tuple[int, int], payload: dict) -> bool:
    """Whether the payload stored under ``key`` equals ``payload`` as JSON values (``30`` is
    ``30.0``). The digests of one content differ when the site's models change how a value
    is written (a free-form figure that became a float field writes ``30`` as ``30.0``): a
    resend across such an upgrade is a resend, not a conflict. Read only when digests differ."""
    epoch, seq = key
    stored = AgentMessageRecord.objects.filter(run=run, epoch=epoch, seq=seq).values_list(
        "payload", flat=True
    )
    return stored.first() == payload


def _conflict(run: Run, message, stored_type: str, changed: set) -> IngestOutcome:
    """A message whose (epoch, seq) holds other content: refused, logged and counted on the
    run. Neither copy's content is logged or echoed (a forger learns nothing of the stored
    one)."""
    where = f"epoch {message.epoch}, seq {message.seq}"
    reason = (
        f"conflict: {where} is stored with other content (a {stored_type}); this {message.type} "
        "is refused. Sequence numbers are never reused within an epoch: an agent that lost "
        "its spool asks the site for a new epoch."
    )
    logger.warning(
        "run %s: agent message conflict at %s (a %s; stored: a %s)",
        run.id,
        where,
        message.type,
        stored_type,
    )
    run.agent_conflicts += 1
    run.agent_conflict_last = (
        f"{timezone.now():%Y-%m-%d %H:%M:%S} UTC: a {message.type} at {where} "
        f"differed from the stored {stored_type}"
    )
    changed.update(["agent_conflicts", "agent_conflict_last"])
    return IngestOutcome(seq=message.seq, stored=False, refused=reason, conflict=True)


class _BatchTrials:
    """The trials one batch's messages name: those that exist read with one query up front,
    the others created on first sight (messages of a trial may be replayed out of order after
    a reconnect). ``touched``: the trials a stored message used."""

    def __init__(self, run: Run, messages: list):
        self.run = run
        named = {getattr(m, "trial", None) for m in messages} - {None}
        self._known = (
            {trial.index: trial for trial in Trial.objects.filter(run=run, index__in=named)}
            if named
            else {}
        )
        self.touched: dict[int, Trial] = {}

    def __call__(self, index: int) -> Trial:
        if index not in self.touched:
            self.touched[index] = self._known.get(index) or self._create(index)
        return self.touched[index]

    def _create(self, index: int) -> Trial:
        # Not there when the batch began (its run is locked): created without asking again;
        # should another writer have made it meanwhile, that one is used.
        run = self.run
        planned = run_planned_trials(run)
        try:
            with transaction.atomic():
                return Trial.objects.create(
                    run=run,
                    index=index,
                    organization_id=run.organization_id,
                    serve_config={},
                    # The image it runs on is the plan's (its pod's), known before it starts.
                    image_tag=(planned[index].image_tag or "") if index < len(planned) else "",
                )
        except IntegrityError:
            return Trial.objects.get(run=run, index=index)


def _apply(
    run: Run, message, payload: dict, trials: _BatchTrials, rows: PendingRows, now: datetime
) -> list[str]:
    """Applies one message (``payload``: its JSON form) at ``now`` to its rows (new
    measurements go to ``rows``, inserted by the caller); returns the run's fields it changed
    (saved once per batch by the caller)."""
    run.last_heartbeat_at = now
    fields = ["last_heartbeat_at"]
    if isinstance(message, protocol.Hello):
        run.agent_info = {"agent_version": message.agent_version, **message.host.model_dump()}
        fields.append("agent_info")
        gpu_type_driver_seen(run, driver=message.host.driver_version, now=now)
        if run.state in _EARLY_STATES:
            run_transition(run, RunState.STARTING)
            fields.append("state")
    elif isinstance(message, protocol.TrialStarted):
        trial = trials(message.trial)
        trial.serve_config, trial.command = message.serve_config, message.command
        trial.outcome, trial.started_at = TrialOutcome.RUNNING, trial.started_at or now
        trial.save(update_fields=["serve_config", "command", "outcome", "started_at"])
        if run.state in _EARLY_STATES:
            run_transition(run, RunState.BENCHMARKING)
            run.started_at = run.started_at or now
            fields += ["state", "started_at"]
    elif isinstance(message, protocol.ColdStartPhase) and message.phase == protocol.WEIGHTS_PHASE:
        # The run's pod fetched its weights (once, before the first engine): the run's fact,
        # kept apart from the engine phases (times since the engine's process started).
        run.weights_fetch = {**message.detail, "seconds": message.seconds}
        fields.append("weights_fetch")
    elif isinstance(message, protocol.ColdStartPhase):
        trial = trials(message.trial)
        trial.cold_start = {**trial.cold_start, message.phase: message.seconds}
        trial.save(update_fields=["cold_start"])
    elif isinstance(message, protocol.MeasurementReport):
        rate = message.level.request_rate
        rows.add_values(
            Measurement,
            organization_id=run.organization_id,
            trial_id=trials(message.trial).id,
            concurrency=message.level.concurrency,
            request_rate=None if rate in (None, "inf") else rate,
            request_rate_infinite=rate == "inf",
            result=_json_text(payload["result"]),  # as the agent sent it
            server_metrics=_json_text(message.server),
            gpus=_json_text(payload.get("gpus") or []),
            created_at=now,
        )
    elif isinstance(message, protocol.EngineRestarted):
        trial = trials(message.trial)
        restart = message.model_dump(
            mode="json", include={"attempt", "failure_class", "level", "requests_lost", "log_tail"}
        )
        # A restart is stored once per attempt, however often its message is replayed.
        kept = [r for r in trial.restarts if r.get("attempt") != message.attempt]
        trial.restarts = sorted([*kept, restart], key=lambda r: r["attempt"])
        trial.save(update_fields=["restarts"])
    elif isinstance(message, protocol.SearchFinished):
        # Each pod searches its image's trials: its report is kept under that image.
        report = message.model_dump(
            mode="json", exclude={"protocol", "run_id", "epoch", "seq", "sent_at", "type"}
        )
        run.search = {**run.search, run.pod_image_tag: report}
        fields.append("search")
    elif isinstance(message, protocol.EvaluationReport):
        trial_evaluation_record(run=run, trial=trials(message.trial), report=message, now=now)
    elif isinstance(message, protocol.TrialFinished):
        trial = trials(message.trial)
        trial.outcome = message.outcome
        trial.failure_class = message.failure_class or ""
        trial.log_tail = message.log_tail
        trial.capacity = (
            message.capacity.model_dump(mode="json") if message.capacity is not None else None
        )
        trial.finished_at = now
        trial.save(
            update_fields=["outcome", "failure_class", "log_tail", "capacity", "finished_at"]
        )
    return fields
