"""Resume: a run that lost its pod mid-run goes on on a new one.

Guarantees of ``run_resume``:
- Only an active run with a pod, fewer resumes than its frozen ``max_resumes`` (default 1,
  ``BENCHSITE_MAX_RESUMES`` when it started), trials not yet ended and budget left resumes;
  anything else answers False and changes nothing (the caller fails the run as before).
- In one transaction with its audit event (``run.resume``): the lost pod goes to the run's
  ``pod_history`` with its billed seconds and cost (kept in the run's cost from then on);
  every trial that had not ended is reset to pending and its measurements so far are
  discarded (it runs again whole, so each of its measurements is stored exactly once); the
  lost pod's agents are shut out (``epoch_floor``: their later messages are refused); the
  run goes back to provisioning under the next pod name (``bench-<run>-r<n>``), so the lost
  pod is never adopted again.
- After the commit the lost pod is terminated (idempotent; the orphan sweep gets it if that
  fails) and provisioning is enqueued: the new pod's job holds only the unfinished trials.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_record
from runs.frozen_job import run_budget_cap
from runs.models import Measurement, Run, Trial
from runs.models.runs import TERMINAL_RUN_STATES, UNFINISHED_OUTCOMES, RunState, TrialOutcome
from runs.providers.base import ProviderError
from runs.providers.registry import provider_for
from runs.services.provisioning import run_accrued_cost

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
    enqueue_provision: Callable[[str], object] | None = None,
) -> bool:
    """Moves the run to a new pod (see the module docstring); whether it did."""
    now = now or timezone.now()
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("organization").get(id=run_id)
        unfinished = Trial.objects.filter(run=run, outcome__in=UNFINISHED_OUTCOMES)
        if (
            run.state in TERMINAL_RUN_STATES
            or not run.pod_id
            or run.cancel_requested_at is not None
            or run.resumes >= run_max_resumes(run)
            or not _has_unfinished_trials(run, unfinished)
        ):
            return False
        seconds, cost = run_accrued_cost(run, until=now)
        if cost >= run_budget_cap(run):
            return False
        lost = {
            "pod_id": run.pod_id,
            "provider": run.provider,
            "gpu_type": run.pod_gpu_type,
            "cloud_type": run.pod_cloud_type,
            "started_at": run.pod_started_at.isoformat() if run.pod_started_at else None,
            "ended_at": now.isoformat(),
            "billed_seconds": float(seconds) - run.earlier_pods_seconds,
            "cost_usd": str(cost - Decimal(run.earlier_pods_cost_usd)),
            "reason": reason[:500],
        }
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
        run.pod_history = [*run.pod_history, lost]
        run.earlier_pods_seconds, run.earlier_pods_cost_usd = float(seconds), cost
        run.billed_seconds, run.cost_usd = float(seconds), cost
        run.resumes += 1
        run.epoch_floor = run.agent_epoch + 1
        run.state = RunState.PROVISIONING
        run.pod_id = ""
        run.pod_started_at = run.pod_running_at = run.pod_terminated_at = None
        run.price_usd_hr = None
        run.last_heartbeat_at = None
        # Claimable at once: a lease that expired when the run was created.
        run.lease_owner, run.lease_expires_at = "", run.created_at
        run.save()
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
        if enqueue_provision is not None:
            transaction.on_commit(lambda: enqueue_provision(str(run.id)))
    logger.warning("run %s: resumed on a new pod (%s); lost pod %s", run.id, reason, lost["pod_id"])
    try:
        provider_for(org=run.organization, name=lost["provider"] or "local").terminate(
            lost["pod_id"]
        )
    except ProviderError as exc:  # the orphan sweep terminates it on a later pass
        logger.warning("run %s: lost pod %s not terminated yet: %s", run.id, lost["pod_id"], exc)
    return True


def _has_unfinished_trials(run: Run, unfinished) -> bool:
    """Trials left to run: rows not ended, or planned trials never started (no row yet)."""
    planned = {trial["index"] for trial in run.job_spec.get("trials", [])}
    ended = set(
        Trial.objects.filter(run=run)
        .exclude(outcome__in=UNFINISHED_OUTCOMES)
        .values_list("index", flat=True)
    )
    return unfinished.exists() or bool(planned - ended)
