"""The safety net: every rented pod is found again and every run ends, whatever crashed.

Guarantees of ``runs_reconcile`` (run periodically; safe to run twice at once — every state
change is a conditional UPDATE, and terminating a pod twice is harmless):
- a queued or provisioning run without a pod whose lease has expired is provisioned again
  (a lost task, a killed worker); one whose cancel was requested is cancelled;
- an active run whose pod the provider reports running for the first time has that moment
  recorded (``pod_running_at``: the cold start's "pod running");
- an active run's accrued cost is brought up to date from its pod's lifetime and billed rate;
  a run whose cost reached its cap ends ``over_budget`` (its partial results kept) and its pod
  is terminated;
- a run whose cancel was requested more than ``CANCEL_GRACE`` ago ends ``cancelled`` and its
  pod is terminated (the agent normally reports first);
- a run whose agent fell silent (no message for ``AGENT_SILENCE``; ``PROVISION_TIMEOUT``
  before its first) or whose pod is gone ends ``failed`` and its pod is terminated, unless
  it may resume on a new pod (``runs.services.run_resume``: an agent that was heard, resumes
  and budget left), which is then rented for its unfinished trials;
- silence is judged against the site's own ability to hear (``runs.services.ingest_watch``):
  while the address agents report to does not answer, no agent is called silent nor a
  cancel unanswered; once it answers again, both are counted from that moment at the
  earliest, so agents can replay what they spooled meanwhile;
- every run it ends has its trials settled in the same transaction (``run_fail``);
- an ended run whose pod is still up gets it terminated and its final cost recorded;
- every ``bench-*`` pod that no active run owns is terminated (orphans: e.g. a create that
  errored but left a pod, a run deleted behind the site's back);
- a run holding a Runpod pod (``runs.services.runpod_holds``) whose organization's account
  cannot be reached for good (its key deleted, unreadable or refused) has that recorded on the
  run (``pod_unreachable``, shown to staff in the admin) and logged once as an error naming
  the run and its pod, never the key; later passes keep trying, and the record is cleared
  once the account answers again or the pod is released.

A pass costs a fixed number of round trips to the database however many runs are active (the
costs' conditional UPDATEs travel together), plus a few per run it ends or releases; it calls
each provider account once to list its pods, plus once per pod it terminates.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.fields.json import KT
from django.utils import timezone

from runs.costs import month_start
from runs.models import Organization, ProviderCredential, Run
from runs.models.experiments import engine_is_simulated
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.providers.base import (
    PermanentProviderError,
    PodInfo,
    PodState,
    Provider,
    ProviderError,
    pod_name,
    run_id_of_pod,
)
from runs.providers.registry import local_provider, provider_for
from runs.run_as_started import BUDGET_CAP_PATH, ENGINE_KIND_PATH
from runs.services.ingest_watch import IngestHearing, ingest_hearing
from runs.services.notifications.events import notify_budget_use
from runs.services.provisioning import run_accrued_cost, run_release_pod
from runs.services.run_lifecycle import run_fail
from runs.services.run_resume import run_resume
from runs.services.runpod_holds import runs_holding_runpod_pods
from runs.task_queue import enqueue_after_commit

logger = logging.getLogger(__name__)


def _seconds(name: str, default: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=float(getattr(settings, name, default)))


AGENT_SILENCE = _seconds("BENCHSITE_AGENT_SILENCE_SECONDS", 120)
PROVISION_TIMEOUT = _seconds("BENCHSITE_PROVISION_TIMEOUT_SECONDS", 1800)
CANCEL_GRACE = _seconds("BENCHSITE_CANCEL_GRACE_SECONDS", 60)
QUEUE_GRACE = datetime.timedelta(seconds=30)  # a fresh run's task is normally on its way

Account = tuple[str, str | None]  # (provider name, organization id; None for local)


@dataclass
class ReconcileReport:
    """What one pass did, run ids by kind (for logs, tests and the benchmark)."""

    reprovisioned: list[str] = field(default_factory=list)
    over_budget: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    orphans_terminated: list[str] = field(default_factory=list)
    unreachable: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class _Accounts:
    """Every provider account a pass could list: its ``bench-*`` pods by pod id and the
    provider that listed them; and the Runpod accounts that cannot be reached for good, by
    organization id, with why."""

    pods: dict[Account, dict[str, PodInfo]] = field(default_factory=dict)
    providers: dict[Account, Provider] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)


def _accounts(report: ReconcileReport) -> _Accounts:
    """Every ``bench-*`` pod per (provider, organization) account, by pod id: names are not
    unique at Runpod (a create the client gave up on may still rent a second pod); the
    provider that listed each account, to terminate its orphans with; and the accounts that
    cannot be listed for good."""
    accounts = _Accounts()
    try:
        local = local_provider()
        accounts.pods[("local", None)] = {p.pod_id: p for p in local.list_bench_pods()}
        accounts.providers[("local", None)] = local
    except (OSError, ProviderError) as exc:
        report.errors.append(f"local: {exc}")
    # Every organization with a key, too: a create that failed may have rented a pod before
    # any of its runs recorded Runpod as its provider.
    runpod_orgs = Organization.objects.filter(
        Q(id__in=runs_holding_runpod_pods().values("organization_id"))
        | Q(id__in=ProviderCredential.objects.filter(provider="runpod").values("organization_id"))
    )
    for org in runpod_orgs:
        account = ("runpod", str(org.id))
        try:
            provider = provider_for(org=org, name="runpod")
            accounts.pods[account] = {p.pod_id: p for p in provider.list_bench_pods()}
            accounts.providers[account] = provider
        except ProviderError as exc:
            report.errors.append(f"runpod ({org.slug}): {exc}")
            if isinstance(exc, PermanentProviderError):  # no key, or one that cannot work
                accounts.unreachable[str(org.id)] = str(exc)
    return accounts


def _record_unreachable_pods(accounts: _Accounts, report: ReconcileReport) -> None:
    """Records on each run holding a Runpod pod of an account that cannot be reached why its
    pod is out of reach, logging it once; clears the record of runs whose account was
    listed again or whose pod is released."""
    holding = runs_holding_runpod_pods()
    reached = [org_id for name, org_id in accounts.providers if name == "runpod"]
    Run.objects.exclude(pod_unreachable="").filter(
        Q(organization_id__in=reached) | ~Q(id__in=holding.values("id"))
    ).update(pod_unreachable="")
    stranded = holding.filter(organization_id__in=list(accounts.unreachable), pod_unreachable="")
    for run in stranded.only("id", "organization_id", "pod_id", "pod_attempt"):
        pod = run.pod_id or run.pod_name
        why = accounts.unreachable[str(run.organization_id)]
        reason = (
            f"The pod {pod} cannot be reached to terminate it, and may still be billed: {why} "
            "Set the organization's Runpod key again, or terminate the pod in Runpod's console."
        )
        if Run.objects.filter(id=run.id, pod_unreachable="").update(pod_unreachable=reason):
            report.unreachable.append(str(run.id))
            logger.error("run %s: pod %s is out of reach: %s", run.id, pod, why)


def _end(run: Run, state: str, reason: str, report_list: list[str]) -> None:
    if run_fail(run_id=run.id, reason=reason, state=state):
        report_list.append(str(run.id))
        logger.warning("run %s: %s (%s)", run.id, state, reason)


def _resume_or_end(
    run: Run, reason: str, now: datetime.datetime, reprovision: bool, report: ReconcileReport
) -> None:
    """A run that lost its pod goes on on a new one when it may (``run_resume``), else ends
    failed with ``reason``."""
    if run_resume(run_id=run.id, reason=reason, now=now, provision=reprovision):
        report.resumed.append(str(run.id))
    else:
        _end(run, RunState.FAILED, reason, report.failed)


def _counted_from(moment: datetime.datetime, hearing: IngestHearing) -> datetime.datetime:
    """When a silence that began at ``moment`` starts to count: not before the site could
    hear agents again (an agent cannot answer a site that is down)."""
    return max(moment, hearing.since) if hearing.since else moment


def _active_with_pods() -> list[Run]:
    """Active runs that recorded a pod: only what a pass reads, the frozen experiment's cap
    and engine included (``snapshot_cap``, ``snapshot_engine``), not the whole frozen job."""
    return list(
        Run.objects.exclude(state__in=TERMINAL_RUN_STATES)
        .exclude(pod_id="")
        .annotate(
            snapshot_cap=KT(BUDGET_CAP_PATH),
            snapshot_engine=KT(ENGINE_KIND_PATH),
        )
        .only(
            "id",
            "organization_id",
            "provider",
            "pod_id",
            "price_usd_hr",
            "pod_started_at",
            "pod_running_at",
            "earlier_pods_seconds",
            "earlier_pods_cost_usd",
            "resumes",
            "billed_seconds",
            "cost_usd",
            "last_heartbeat_at",
            "created_at",
            "cancel_requested_at",
            "cancel_reason",
        )
        .order_by()
    )


def _record_costs(runs: list[Run], now: datetime.datetime) -> None:
    """Brings the billed seconds and cost of each run whose figures changed up to ``now``:
    one conditional UPDATE per run (a run that ended meanwhile keeps its final figures), all
    sent at once and committed together."""
    changed = []
    for run in runs:
        seconds, cost = run_accrued_cost(run, until=now)
        if (run.billed_seconds, run.cost_usd) != (float(seconds), cost):
            run.billed_seconds, run.cost_usd = float(seconds), cost
            changed.append(run)
    if not changed:
        return
    # executemany, not the ORM: psycopg pipelines the statements (one round trip for all),
    # where an ORM update per run waits for each, and bulk_update builds a CASE per run.
    fields = [Run._meta.get_field(name) for name in ("billed_seconds", "cost_usd", "id", "state")]
    table = connection.ops.quote_name(Run._meta.db_table)
    billed_col, cost_col, id_col, state_col = (connection.ops.quote_name(f.column) for f in fields)
    ended = sorted(str(state) for state in TERMINAL_RUN_STATES)
    # Only the model's own names are formatted in; every value is a parameter.
    sql = (
        f"UPDATE {table} SET {billed_col} = %s, {cost_col} = %s "  # noqa: S608
        f"WHERE {id_col} = %s AND {state_col} NOT IN ({', '.join(['%s'] * len(ended))})"
    )
    rows = [
        [field.get_db_prep_save(getattr(run, field.attname), connection) for field in fields[:3]]
        + ended
        for run in changed
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def runs_reconcile(
    *, now: datetime.datetime | None = None, reprovision: bool = False
) -> ReconcileReport:
    """One reconcile pass (see the module docstring). ``reprovision``: whether it enqueues
    the provisioning of the runs it finds without a pod (the periodic task's pass does)."""
    now = now or timezone.now()
    report = ReconcileReport()

    # 1. Runs that need a pod and have no live claim on one.
    waiting = (
        Run.objects.filter(
            Q(state=RunState.QUEUED) | Q(state=RunState.PROVISIONING),
            pod_id="",
            created_at__lt=now - QUEUE_GRACE,
        )
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .only("id", "cancel_requested_at", "cancel_reason")
        .order_by()
    )
    for run in waiting:
        if run.cancel_requested_at is not None:
            _end(run, RunState.CANCELLED, run.cancel_reason or "cancelled", report.cancelled)
        elif reprovision:
            enqueue_after_commit("runs.tasks.run_provision", str(run.id))
            report.reprovisioned.append(str(run.id))

    # 2. Active runs with a pod.
    accounts = _accounts(report)
    pods, providers = accounts.pods, accounts.providers
    active = _active_with_pods()
    _record_costs(active, now)
    for org in Organization.objects.filter(id__in={run.organization_id for run in active}):
        notify_budget_use(org=org, month=month_start(now))
    # Whether agents could have been heard at all: asked only when some run could be judged.
    hearing = ingest_hearing(now=now, window=AGENT_SILENCE) if active else IngestHearing(False)
    seen_running: list = []
    for run in active:
        account = (
            ("local", None) if run.provider == "local" else ("runpod", str(run.organization_id))
        )
        cost = run.cost_usd
        cap = None if run.snapshot_cap is None else Decimal(str(run.snapshot_cap))
        heard = run.last_heartbeat_at or run.pod_started_at or run.created_at
        silence = AGENT_SILENCE if run.last_heartbeat_at else PROVISION_TIMEOUT
        pod = pods.get(account, {}).get(run.pod_id)
        if pod is not None and pod.state == PodState.RUNNING and run.pod_running_at is None:
            seen_running.append(run.id)
        if cap is not None and cost >= cap and not engine_is_simulated(run.snapshot_engine):
            _end(
                run,
                RunState.OVER_BUDGET,
                f"Stopped at the budget cap (${cap}).",
                report.over_budget,
            )
        elif (
            hearing.reachable
            and run.cancel_requested_at
            and now - _counted_from(run.cancel_requested_at, hearing) > CANCEL_GRACE
        ):
            _end(run, RunState.CANCELLED, run.cancel_reason or "cancelled", report.cancelled)
        elif hearing.reachable and now - _counted_from(heard, hearing) > silence:
            if run.last_heartbeat_at:
                reason = f"The agent fell silent (last heard {heard:%H:%M:%S} UTC)."
                _resume_or_end(run, reason, now, reprovision, report)
            else:
                where = f"the pod is {pod.state}" if pod is not None else "the pod is not listed"
                reason = (
                    f"The agent never reported: no word {int(silence.total_seconds())} s after "
                    f"the pod was rented ({where})."
                )
                _end(run, RunState.FAILED, reason, report.failed)
        elif (
            account in pods
            and (pod is None or pod.state in (PodState.EXITED, PodState.TERMINATED))
            and now - heard > min(AGENT_SILENCE, datetime.timedelta(seconds=30))
        ):
            reason = "The pod stopped before the run finished."
            _resume_or_end(run, reason, now, reprovision, report)

    if seen_running:  # the cold start's "pod running" moment: the first pass to see it
        Run.objects.filter(id__in=seen_running, pod_running_at__isnull=True).update(
            pod_running_at=now
        )

    # 3. Ended runs whose pod is still rented.
    unreleased = (
        Run.objects.filter(state__in=TERMINAL_RUN_STATES, pod_terminated_at__isnull=True)
        .exclude(pod_id="")
        .values_list("id", flat=True)
        .order_by()
    )
    for run_id in unreleased:
        try:
            if run_release_pod(run_id=run_id):
                report.released.append(str(run_id))
        except ProviderError as exc:
            report.errors.append(f"run {run_id}: {exc}")

    # 4. Orphans: bench-* pods no active run owns. An active run owns the pod it recorded;
    #    until it records one, any pod of its name (it may be about to adopt it).
    #    A run on its second pod or later owns only the current one
    #    (``pod_name(run, pod_attempt)``).
    active_pods = {
        str(run_id): (pod_id, pod_name(run_id, attempt))
        for run_id, pod_id, attempt in Run.objects.exclude(state__in=TERMINAL_RUN_STATES)
        .values_list("id", "pod_id", "pod_attempt")
        .order_by()
    }
    released = set(report.released)
    for account, account_pods in pods.items():
        for pod in account_pods.values():
            name, owner = pod.name, run_id_of_pod(pod.name)
            recorded, current_name = active_pods.get(owner, (None, None))
            owned = recorded == pod.pod_id or (recorded == "" and name == current_name)
            if owned or owner in released:
                continue  # owned, or terminated a moment ago in step 3
            try:
                providers[account].terminate(pod.pod_id)
                report.orphans_terminated.append(name)
                logger.warning("terminated orphan pod %s (%s)", name, account[0])
            except ProviderError as exc:
                report.errors.append(f"orphan {name}: {exc}")

    # 5. Pods out of reach: the operator is told, once.
    _record_unreachable_pods(accounts, report)
    return report
