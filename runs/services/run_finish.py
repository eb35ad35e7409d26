"""Where a run becomes succeeded: its agent's ``run_finished``, once it counts.

Guarantees of ``run_finish_if_complete`` (called by ingest, in the transaction that stored
the message, with the run's row locked):
- a ``run_finished`` counts once every message before it in its epoch is stored (resends
  after a reconnect may fill gaps in any order; each agent incarnation numbers its own epoch
  from 0); until then a run that has one waits ``finalizing``;
- only the current pod's agents count: a pod the run has left said its last word;
- a succeeded pod with trials of a later image left moves the run to that image's pod
  (``pod_moves.run_move_to_next_image``) instead of ending it, unless the budget is spent
  (then the run fails, saying so);
- otherwise the run ends in the agent's outcome (a deadline is a failure with partial
  results; a cancel nobody asked for — the pod stopped from outside — is a failure), is
  settled in the same transaction (``run_end.run_end_settle``), and its pod is given back by
  ``run_finalize`` after the commit (reconcile catches a lost task).
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from runs.models import AgentMessageRecord, Run
from runs.models.runs import RunState
from runs.services.pod_moves import run_move_to_next_image
from runs.services.run_end import run_end_settle
from runs.services.run_lifecycle import run_transition
from runs.task_queue import enqueue_after_commit

_FINAL_STATE = {
    "succeeded": RunState.SUCCEEDED,
    "failed": RunState.FAILED,
    "cancelled": RunState.CANCELLED,
    "deadline": RunState.FAILED,
}


def _finishes(run: Run) -> QuerySet[AgentMessageRecord]:
    """The ``run_finished`` messages of the run's current pod."""
    return AgentMessageRecord.objects.filter(
        run=run, type="run_finished", epoch__gte=run.epoch_floor
    )


def _counted_finish(run: Run) -> AgentMessageRecord | None:
    """The latest ``run_finished`` of the current pod whose epoch is whole up to it."""
    return next(
        (
            candidate
            for candidate in _finishes(run).order_by("-epoch")
            if AgentMessageRecord.objects.filter(
                run=run, epoch=candidate.epoch, seq__lte=candidate.seq
            ).count()
            == candidate.seq + 1
        ),
        None,
    )


def run_finish_if_complete(run: Run) -> None:
    """Ends (or moves on) the locked ``run`` once its agent's ``run_finished`` counts (see
    the module docstring)."""
    finished = _counted_finish(run)
    if finished is None:
        if _finishes(run).exists():
            run_transition(run, RunState.FINALIZING)  # wait for the gaps to be resent
            run.save(update_fields=["state"])
        return
    outcome = finished.payload["outcome"]
    now = timezone.now()
    next_image = run_move_to_next_image(run, now=now) if outcome == "succeeded" else None
    if next_image is not None and next_image.moved:
        return
    state, reason = _FINAL_STATE[outcome], run.failure_reason
    if next_image is not None and next_image.refused:
        state, reason = RunState.FAILED, next_image.refused
    if outcome == "deadline":
        reason = "The agent stopped at the run's deadline; partial results kept."
    elif outcome == "cancelled" and run.cancel_requested_at is None:
        # Nobody here asked: the pod was stopped from outside (Runpod, its console, a host
        # going down) and the agent said so on its way out. That is a failure, not a cancel.
        said = finished.payload.get("reason") or "the agent gave no reason"
        state, reason = RunState.FAILED, f"The pod stopped before the run finished ({said})."
    elif finished.payload.get("reason"):
        reason = finished.payload["reason"]
    run_transition(run, state)
    run.finished_at, run.failure_reason = now, reason
    run.save(update_fields=["state", "finished_at", "failure_reason"])
    run_end_settle(run=run, reason=run.failure_reason)
    # The pod is given back as soon as the run is over.
    enqueue_after_commit("runs.tasks.run_finalize", str(run.id))
