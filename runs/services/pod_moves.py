"""A run leaving its pod for the next one: after losing it (``runs.services.run_resume``), or
once it has measured every trial of its image and the next image tag is left
(``run_move_to_next_image``, called by ``run_finish`` when the pod's agent has finished).

Guarantees of ``run_leave_pod`` (inside the transaction that holds the run's row lock):
- the pod goes to the run's ``pod_history`` (id, where, image, lifetime, billed seconds and
  cost, why it was left); its seconds and cost stay in the run's from then on;
- its agents are shut out: messages of epochs below the new ``epoch_floor`` are refused;
- the run goes back to provisioning under the next pod name (``pod_attempt`` + 1), so the
  left pod is never adopted again, claimable at once.

Guarantees of ``run_move_to_next_image``:
- it moves only a run whose first trial not yet ended is of another image than its pod's
  (so never a run of one image), only while budget is left; otherwise it changes nothing and
  says why when budget was what it lacked;
- the move is audited (``run.next_image``) in the same transaction; after the commit the left
  pod is terminated and the next pod provisioned (both by tasks; the reconcile pass does
  either if its task is lost: the orphan sweep and the re-provisioning of a run without pod).
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from decimal import Decimal

from runs.actors import Actor
from runs.audit import audit_record
from runs.models import Run
from runs.models.runs import RunState
from runs.pod_job import run_images_left
from runs.providers.base import ProviderError
from runs.providers.registry import provider_for
from runs.run_as_started import run_budget_cap, run_engine
from runs.services.provisioning import run_accrued_cost
from runs.services.run_lifecycle import run_transition
from runs.task_queue import enqueue_after_commit

logger = logging.getLogger(__name__)


def run_leave_pod(run: Run, *, now: datetime.datetime, reason: str, kind: str) -> dict:
    """Moves ``run`` (locked, unsaved changes are saved here) off its pod; returns the left
    pod's record as kept in ``pod_history``. ``kind``: ``lost`` or ``next_image``."""
    seconds, cost = run_accrued_cost(run, until=now)
    left = {
        "pod_id": run.pod_id,
        "provider": run.provider,
        "gpu_type": run.pod_gpu_type,
        "cloud_type": run.pod_cloud_type,
        "image_tag": run.pod_image_tag,
        "vllm_version": (run.agent_info or {}).get("vllm_version"),
        # The CUDA and driver pair the pod ran (the experiment page lists each pod's).
        "image_cuda_version": (run.agent_info or {}).get("image_cuda_version"),
        "driver_version": (run.agent_info or {}).get("driver_version"),
        "started_at": run.pod_started_at.isoformat() if run.pod_started_at else None,
        "ended_at": now.isoformat(),
        "billed_seconds": float(seconds) - run.earlier_pods_seconds,
        "cost_usd": str(cost - Decimal(run.earlier_pods_cost_usd)),
        "kind": kind,
        "reason": reason[:500],
    }
    run.pod_history = [*run.pod_history, left]
    run.earlier_pods_seconds, run.earlier_pods_cost_usd = float(seconds), cost
    run.billed_seconds, run.cost_usd = float(seconds), cost
    run.pod_attempt += 1
    run.epoch_floor = run.agent_epoch + 1
    run_transition(run, RunState.PROVISIONING)
    run.pod_id = ""
    run.pod_started_at = run.pod_running_at = run.pod_terminated_at = None
    run.price_usd_hr = None
    run.last_heartbeat_at = None
    run.agent_info = {}  # the next pod's agent says hello for itself
    # Claimable at once: a lease that expired when the run was created.
    run.lease_owner, run.lease_expires_at = "", run.created_at
    run.save()
    return left


def left_pod_terminate(*, run_id, pod_id: str) -> bool:
    """Terminates a pod ``run_id`` has left (idempotent); False when the provider could not
    (the orphan sweep terminates it on a later pass)."""
    run = Run.objects.select_related("organization").get(id=run_id)
    left = next((pod for pod in run.pod_history if pod.get("pod_id") == pod_id), None)
    if left is None:
        return False
    try:
        provider_for(org=run.organization, name=left["provider"] or "local").terminate(pod_id)
    except ProviderError as exc:
        logger.warning("run %s: left pod %s not terminated yet: %s", run_id, pod_id, exc)
        return False
    return True


@dataclass(frozen=True)
class NextImage:
    """What ``run_move_to_next_image`` did: moved the run on, or not and why ("" when no other image
    was left to run)."""

    moved: bool
    refused: str = ""


def run_move_to_next_image(run: Run, *, now: datetime.datetime) -> NextImage:
    """Moves ``run`` (locked; its pod's agent has finished) to a pod of its next image, when
    one is left and the budget allows (see the module docstring)."""
    left_images = run_images_left(run)
    current = run.pod_image_tag or run_engine(run).image_tag
    # Trials of this pod's own image still open (its agent never reported them) end with the
    # run, as in a run of one image; they never make it rent again.
    if not left_images or left_images[0] == current or run.cancel_requested_at is not None:
        return NextImage(moved=False)
    next_tag = left_images[0]
    _, cost = run_accrued_cost(run, until=now)
    cap = run_budget_cap(run)
    if cost >= cap:
        later = ", ".join(str(tag) for tag in left_images)
        return NextImage(
            moved=False,
            refused=f"The budget cap (${cap}) was spent before the trials on {later} ran; "
            f"the results on {current} are kept.",
        )
    left = run_leave_pod(
        run, now=now, reason=f"every trial on {run.pod_image_tag} ended", kind="next_image"
    )
    audit_record(
        org=run.organization,
        actor=Actor.system("ingest"),
        event="run.next_image",
        target=run,
        after={"left_pod": left["pod_id"], "image_tag": left["image_tag"], "next": next_tag},
    )
    enqueue_after_commit("runs.tasks.left_pod_release", str(run.id), left["pod_id"])
    enqueue_after_commit("runs.tasks.run_provision", str(run.id))
    logger.info("run %s: %s done; on to %s", run.id, left["image_tag"], next_tag)
    return NextImage(moved=True)
