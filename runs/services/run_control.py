"""Stopping a run on a person's request.

Guarantees of ``run_cancel``:
- a run that has ended is refused (``Conflict``) and nothing is written;
- a queued run (nothing rented, no agent yet) is cancelled at once, its planned trials
  settled as not run (``runs.services.trial_settling``);
- any other run is marked once: the first request's time and reason stand, a repeat writes
  nothing and records no second event. The run becomes cancelled when its agent reports
  ``run_finished`` with the outcome ``cancelled`` (``runs.services.ingest``);
- the change and its ``run.cancel`` audit event are committed together. Telling the agent
  (``runs.consumers.notices``) is a side effect after the commit whose loss costs nothing:
  the agent also learns of the request when its socket (re)connects and in the answer to
  every REST batch.
"""

from __future__ import annotations

import functools

from django.db import transaction
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_diff, audit_record, audit_snapshot
from runs.consumers.notices import agent_cancel_notify
from runs.errors import Conflict
from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.services.run_end import run_end_settle
from runs.services.run_lifecycle import run_transition
from runs.services.text_input import clean_short_text

MAX_CANCEL_REASON_CHARS = Run._meta.get_field("cancel_reason").max_length


def _clean_reason(reason: object) -> str:
    return clean_short_text(reason, field="reason", max_chars=MAX_CANCEL_REASON_CHARS)


@transaction.atomic
def run_cancel(*, actor: Actor, run: Run, reason: str = "") -> Run:
    """Cancels ``run``: at once when it is queued, else by asking its agent to stop."""
    reason = _clean_reason(reason)
    run = Run.objects.select_for_update().get(pk=run.pk)
    if run.state in TERMINAL_RUN_STATES:
        raise Conflict(f"Run {run.id} has already ended ({run.state}).")
    if run.cancel_requested_at is not None:
        # Asked again: the first request stands. A lost notice is the likeliest reason to
        # ask twice, so the agent is told again.
        _tell_agent_on_commit(run)
        return run
    before = audit_snapshot(run)
    now = timezone.now()
    run.cancel_requested_at, run.cancel_reason = now, reason
    fields = ["cancel_requested_at", "cancel_reason"]
    if run.state == RunState.QUEUED:
        # Nothing is rented yet; a provisioning task claims the run only while it is queued.
        run_transition(run, RunState.CANCELLED)
        run.finished_at, run.failure_reason = now, reason
        fields += ["state", "finished_at", "failure_reason"]
    else:
        _tell_agent_on_commit(run)
    run.save(update_fields=fields)
    if run.state == RunState.CANCELLED:
        run_end_settle(run=run, reason=reason or "cancelled")
    old, new = audit_diff(before, audit_snapshot(run))
    audit_record(
        org=run.organization, actor=actor, event="run.cancel", target=run, before=old, after=new
    )
    return run


def run_stop_request(run: Run) -> str | None:
    """Why the run's agent must stop, or None: a cancel request, or the run's end (an ended
    run's agent may only deliver what it holds, ``runs.services.run_tokens``)."""
    if run.cancel_requested_at is not None:
        return run.cancel_reason
    if run.state in TERMINAL_RUN_STATES:
        return f"the run has ended ({run.state})"
    return None


def _tell_agent_on_commit(run: Run) -> None:
    transaction.on_commit(functools.partial(agent_cancel_notify, run.id, run.cancel_reason))
