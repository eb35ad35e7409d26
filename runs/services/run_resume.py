"""Resume: a run that lost its pod mid-run goes on on a new one.

Guarantees of ``run_resume``:
- Only an active run with a pod, fewer resumes than its frozen ``max_resumes`` (default 1,
  ``BENCHSITE_MAX_RESUMES`` when it started), trials not yet ended and budget left resumes;
  anything else answers False and changes nothing (the caller fails the run as before).
- In one transaction with its audit event (``run.resume``): every trial that had not ended
  is reset to pending and its measurements so far are discarded (it runs again whole, so
  each of its measurements is stored exactly once); the run leaves the lost pod
  (``runs.services.pod_moves.run_leave_pod``: kept in its pod history and cost, its agents
  shut out, back to provisioning under the next pod name, never adopting the lost one).
- After the commit the lost pod is terminated (idempotent; the orphan sweep gets it if that
  fails) and provisioning is enqueued: the new pod's job holds only the unfinished trials.
"""

from __future__ import annotations

import datetime
import logging

from django.db import transaction
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_record
from runs.models import Measurement, Run, Trial
from runs.models.runs import TERMINAL_RUN_STATES, UNFINISHED_OUTCOMES, TrialOutcome
from runs.pod_job import run_images_left
from runs.run_as_started import run_budget_cap
from runs.services.pod_moves import left_pod_terminate, run_leave_pod
from runs.services.provisioning import run_accrued_cost
from runs.task_queue import enqueue_after_commit

logger = logging.getLogger(__name__)

# Runs started before resumes were frozen into their snapshot: the setting's default.
DEFAULT_MAX_RESUMES = 1


def run_max_resumes(run: Run) -> int:
    """How many times the run may move to a new pod, as frozen when it started."""
    frozen = run.experiment_snapshot.get("max_resumes")
    return frozen if isinstance(frozen, int) else DEFAULT_MAX_RESUMES


def run_resume(
    *,
    run_id,
    reason: str,
    now: datetime.datetime | None = None,
    provision: bool = False,
) -> bool:
    """Moves the run to a new pod (see the module docstring); whether it did. ``provision``:
    whether its provisioning is enqueued here (else the next reconcile pass does it)."""
    now = now or timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("organization").get(id=run_id)
        unfinished = Trial.objects.filter(run=run, outcome__in=UNFINISHED_OUTCOMES)
        if (
            run.state in TERMINAL_RUN_STATES
            or not run.pod_id
            or run.cancel_requested_at is not None
            or run.resumes >= run_max_resumes(run)
            or not run_images_left(run)
        ):
            return False
        _, cost = run_accrued_cost(run, until=now)
        if cost >= run_budget_cap(run):
            return False
        indices = sorted(unfinished.values_list("index", flat=True))
        discarded, _ = Measurement.objects.filter(trial__in=unfinished).delete()
        unfinished.update(
            outcome=TrialOutcome.PENDING,
            cold_start={},
            restarts=[],
            capacity=None,
            failure_class="",
            log_tail="",
            started_at=None,
            finished_at=None,
        )
        run.resumes += 1
        lost = run_leave_pod(run, now=now, reason=reason, kind="lost")
        audit_record(
            org=run.organization,
            actor=Actor.system("reconcile"),
            event="run.resume",
            target=run,
            after={
                "reason": reason[:500],
                "lost_pod": lost["pod_id"],
                "resume": run.resumes,
                "max_resumes": run_max_resumes(run),
                "trials_again": indices,
                "measurements_discarded": discarded,
            },
        )
        if provision:
            enqueue_after_commit("runs.tasks.run_provision", str(run.id))
    logger.warning("run %s: resumed on a new pod (%s); lost pod %s", run.id, reason, lost["pod_id"])
    left_pod_terminate(run_id=run.id, pod_id=lost["pod_id"])
    return True
