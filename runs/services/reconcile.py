"""The safety net: every rented pod is found again and every run ends, whatever crashed.

Guarantees of ``runs_reconcile`` (run periodically; safe to run twice at once — every state
change is a conditional UPDATE, and terminating a pod twice is harmless):
- a queued or provisioning run without a pod whose lease has expired is provisioned again
  (a lost task, a killed worker); one whose cancel was requested is cancelled;
- an active run's accrued cost is brought up to date from its pod's lifetime and billed rate;
  a run whose cost reached its cap ends ``over_budget`` (its partial results kept) and its pod
  is terminated;
- a run whose cancel was requested more than ``CANCEL_GRACE`` ago ends ``cancelled`` and its
  pod is terminated (the agent normally reports first);
- a run whose agent fell silent (no message for ``AGENT_SILENCE``; ``PROVISION_TIMEOUT``
  before its first) or whose pod is gone ends ``failed`` and its pod is terminated;
- an ended run whose pod is still up gets it terminated and its final cost recorded;
- every ``bench-*`` pod that no active run owns is terminated (orphans: e.g. a create that
  errored but left a pod, a run deleted behind the site's back).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from runs.models import Organization, Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.providers.base import PodInfo, PodState, ProviderError, pod_name, run_id_of_pod
from runs.providers.registry import local_provider, provider_for
from runs.services.provisioning import run_accrued_cost, run_fail, run_release_pod

logger = logging.getLogger(__name__)


def _seconds(name: str, default: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=float(getattr(settings, name, default)))


AGENT_SILENCE = _seconds("BENCHSITE_AGENT_SILENCE_SECONDS", 120)
PROVISION_TIMEOUT = _seconds("BENCHSITE_PROVISION_TIMEOUT_SECONDS", 1800)
CANCEL_GRACE = _seconds("BENCHSITE_CANCEL_GRACE_SECONDS", 60)
QUEUE_GRACE = datetime.timedelta(seconds=30)  # a fresh run's task is normally on its way


@dataclass
class ReconcileReport:
    """What one pass did, run ids by kind (for logs, tests and the benchmark)."""

    reprovisioned: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    orphans_terminated: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _pods_by_account(report: ReconcileReport) -> dict[tuple[str, str | None], dict[str, PodInfo]]:
    """Every ``bench-*`` pod per (provider, organization) account, by pod name."""
    accounts: dict[tuple[str, str | None], dict[str, PodInfo]] = {}
    try:
        accounts[("local", None)] = {pod.name: pod for pod in local_provider().list_bench_pods()}
    except (OSError, ProviderError) as exc:
        report.errors.append(f"local: {exc}")
    runpod_orgs = Organization.objects.filter(runs__provider="runpod").distinct()
    for org in runpod_orgs:
        try:
            provider = provider_for(org=org, name="runpod")
            accounts[("runpod", str(org.id))] = {p.name: p for p in provider.list_bench_pods()}
        except ProviderError as exc:
            report.errors.append(f"runpod ({org.slug}): {exc}")
    return accounts


def _end(run: Run, state: str, reason: str, report_list: list[str]) -> None:
    if run_fail(run_id=run.id, reason=reason, state=state):
        report_list.append(str(run.id))
        logger.warning("run %s: %s (%s)", run.id, state, reason)


def _cap_usd(run: Run) -> Decimal | None:
    cap = run.experiment_snapshot.get("budget_cap_usd")
    return Decimal(cap) if cap is not None else None


def runs_reconcile(
    *,
    now: datetime.datetime | None = None,
    enqueue_provision: Callable[[str], object] | None = None,
) -> ReconcileReport:
    """One reconcile pass (see the module docstring)."""
    now = now or timezone.now()
    report = ReconcileReport()

    # 1. Runs that need a pod and have no live claim on one.
    waiting = Run.objects.filter(
        Q(state=RunState.QUEUED) | Q(state=RunState.PROVISIONING),
        pod_id="",
        created_at__lt=now - QUEUE_GRACE,
    ).filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
    for run in waiting:
        if run.cancel_requested_at is not None:
            _end(run, RunState.CANCELLED, run.cancel_reason or "cancelled", report.cancelled)
        elif enqueue_provision is not None:
            enqueue_provision(str(run.id))
            report.reprovisioned.append(str(run.id))

    # 2. Active runs with a pod.
    pods = _pods_by_account(report)
    active = (
        Run.objects.exclude(state__in=TERMINAL_RUN_STATES)
        .exclude(pod_id="")
        .select_related("organization")
    )
    for run in active:
        account = (
            ("local", None) if run.provider == "local" else ("runpod", str(run.organization_id))
        )
        seconds, cost = run_accrued_cost(run, until=now)
        Run.objects.filter(id=run.id).exclude(state__in=TERMINAL_RUN_STATES).update(
            billed_seconds=float(seconds), cost_usd=cost
        )
        cap = _cap_usd(run)
        heard = run.last_heartbeat_at or run.pod_started_at or run.created_at
        silence = AGENT_SILENCE if run.last_heartbeat_at else PROVISION_TIMEOUT
        pod = pods.get(account, {}).get(pod_name(run.id))
        if cap is not None and cost >= cap and run.experiment_snapshot.get("engine") != "sim":
            _end(
                run,
                RunState.OVER_BUDGET,
                f"Stopped at the budget cap (${cap}).",
                report.over_budget,
            )
        elif run.cancel_requested_at and now - run.cancel_requested_at > CANCEL_GRACE:
            _end(run, RunState.CANCELLED, run.cancel_reason or "cancelled", report.cancelled)
        elif now - heard > silence:
            _end(
                run,
                RunState.FAILED,
                f"The agent fell silent (last heard {heard:%H:%M:%S} UTC).",
                report.failed,
            )
        elif (
            account in pods
            and (pod is None or pod.state in (PodState.EXITED, PodState.TERMINATED))
            and now - heard > min(AGENT_SILENCE, datetime.timedelta(seconds=30))
        ):
            _end(run, RunState.FAILED, "The pod stopped before the run finished.", report.failed)

    # 3. Ended runs whose pod is still rented.
    unreleased = Run.objects.filter(
        state__in=TERMINAL_RUN_STATES, pod_terminated_at__isnull=True
    ).exclude(pod_id="")
    for run in unreleased:
        try:
            if run_release_pod(run_id=run.id):
                report.released.append(str(run.id))
        except ProviderError as exc:
            report.errors.append(f"run {run.id}: {exc}")

    # 4. Orphans: bench-* pods no active run owns.
    active_ids = {
        str(i)
        for i in Run.objects.exclude(state__in=TERMINAL_RUN_STATES).values_list("id", flat=True)
    }
    for (provider_name, org_id), account_pods in pods.items():
        for name, pod in account_pods.items():
            if run_id_of_pod(name) in active_ids or run_id_of_pod(name) in report.released:
                continue  # owned, or terminated a moment ago in step 3
            try:
                org = Organization.objects.get(id=org_id) if org_id else None
                provider = (
                    local_provider()
                    if provider_name == "local"
                    else provider_for(org=org, name=provider_name)
                )
                provider.terminate(pod.pod_id)
                report.orphans_terminated.append(name)
                logger.warning("terminated orphan pod %s (%s)", name, provider_name)
            except ProviderError as exc:
                report.errors.append(f"orphan {name}: {exc}")
    return report
