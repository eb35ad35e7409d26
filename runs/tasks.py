"""Celery tasks: short, idempotent, bounded. They take ids, parse nothing, and call services.

Every task is ``acks_late`` with ``reject_on_worker_lost`` (a worker killed mid-task leaves
the message to be delivered again) and time-limited; the services they call claim their
step with conditional UPDATEs and leases, so a second delivery does nothing twice. No task
waits for a benchmark: the agent pushes its results and ``runs_reconcile`` is the safety net.
"""

from __future__ import annotations

import logging
import random
import socket

from celery import shared_task

from runs.providers.base import TransientProviderError
from runs.services.calibrations import calibration_refit as calibration_refit_service
from runs.services.notifications.delivery import deliveries_due, delivery_attempt
from runs.services.pod_moves import left_pod_terminate
from runs.services.price_refresh import gpu_prices_refresh as price_refresh_service
from runs.services.provisioning import run_provision as provision_service
from runs.services.provisioning import run_release_pod
from runs.services.reconcile import runs_reconcile as reconcile_service
from runs.services.run_lifecycle import run_fail
from runs.services.schedule_firing import schedule_fire as schedule_fire_service
from runs.services.schedule_gate import schedule_run_gate

logger = logging.getLogger(__name__)

MAX_RETRIES = 5
RETRY_BASE_SECONDS = 10
RETRY_MAX_SECONDS = 300  # far below the broker's visibility timeout (1 h)

TASK_OPTIONS = {
    "acks_late": True,
    "reject_on_worker_lost": True,
    "time_limit": 180,
    "soft_time_limit": 170,
}


def _retry_delay(retries: int) -> float:
    """Exponential backoff with full jitter."""
    return random.uniform(0, min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 2**retries))  # noqa: S311


@shared_task(bind=True, max_retries=MAX_RETRIES, **TASK_OPTIONS)
def run_provision(self, run_id: str) -> str:
    """Rents (or adopts) the run's pod; transient provider errors are retried with backoff,
    and after the last retry the run fails with the reason."""
    task_id = self.request.id
    owner = f"{socket.gethostname()}:{task_id or 'eager'}"
    try:
        return provision_service(run_id=run_id, owner=owner, task_id=task_id)
    except TransientProviderError as exc:
        if self.request.retries >= self.max_retries:
            run_fail(run_id=run_id, reason=f"No pod after {self.max_retries + 1} attempts: {exc}")
            return "failed"
        logger.warning("run %s: provisioning will be retried: %s", run_id, exc)
        raise self.retry(countdown=_retry_delay(self.request.retries), exc=exc) from None


@shared_task(**TASK_OPTIONS)
def run_finalize(run_id: str) -> bool:
    """Terminates an ended run's pod and records its final cost (idempotent; reconcile does
    the same for any it misses)."""
    return run_release_pod(run_id=run_id)


@shared_task(**TASK_OPTIONS)
def calibration_refit(run_id: str) -> int:
    """Refits the simulator's calibrations a succeeded measured run feeds (idempotent: a run
    refits each of its keys once); returns how many it made or found."""
    return len(calibration_refit_service(run_id=run_id))


@shared_task(**TASK_OPTIONS)
def left_pod_release(run_id: str, pod_id: str) -> bool:
    """Terminates a pod the run has left for its next one (idempotent; the orphan sweep
    terminates any it misses)."""
    return left_pod_terminate(run_id=run_id, pod_id=pod_id)


@shared_task(**TASK_OPTIONS)
def runs_reconcile() -> dict:
    """The periodic safety net (Celery beat): see ``runs.services.reconcile``."""
    report = reconcile_service(reprovision=True)
    return {key: len(value) for key, value in vars(report).items()}


@shared_task(**TASK_OPTIONS)
def gpu_prices_refresh() -> dict:
    """Refreshes the GPU price catalogue from Runpod (Celery beat, daily): see
    ``runs.services.price_refresh``."""
    from runs.providers.registry import catalogue_price_provider

    report = price_refresh_service(provider=catalogue_price_provider())
    return {
        key: value if isinstance(value, str) else len(value) for key, value in vars(report).items()
    }


@shared_task(**TASK_OPTIONS)
def audit_chains_verify() -> dict:
    """Walks every organization's whole audit chain (Celery beat, daily) and records each
    result on its checkpoint, so a break before the audit page's checkpoint is shown there
    (``runs.audit``). Returns the slugs of broken chains."""
    from runs.audit import audit_chain_verify_full
    from runs.models import Organization

    broken = [
        org.slug
        for org in Organization.objects.order_by("slug")
        if audit_chain_verify_full(org=org) is not None
    ]
    return {"broken": broken}


@shared_task(**TASK_OPTIONS)
def notification_deliver(delivery_id: str) -> str:
    """One attempt at a notification's delivery; a failed one is sent again after its
    backoff (``runs.services.notifications.delivery``), and the sweep catches a lost retry."""
    retry_in = delivery_attempt(delivery_id)
    if retry_in is None:
        return "done"
    notification_deliver.apply_async((delivery_id,), countdown=retry_in)
    return "retry"


@shared_task(**TASK_OPTIONS)
def notifications_sweep() -> int:
    """Sends the deliveries whose retry is overdue (their task was lost with a worker)."""
    due = deliveries_due()
    for delivery_id in due:
        notification_deliver.delay(str(delivery_id))
    return len(due)


@shared_task(**TASK_OPTIONS)
def schedule_gate(run_id: str) -> str:
    """Gates a scheduled run that ended against its experiment's promoted baseline (enqueued
    after the commit that ended it; idempotent): the firing's verdict."""
    return schedule_run_gate(run_id=run_id)


@shared_task(**TASK_OPTIONS)
def schedule_fire(schedule_id: str) -> str:
    """Beat's tick of an experiment's schedule: its run, or why none started
    (``runs.services.schedules``)."""
    firing = schedule_fire_service(schedule_id=schedule_id)
    if firing is None:
        return "paused or gone"
    return f"run {firing.run_id}" if firing.run_id else f"refused: {firing.refused}"
