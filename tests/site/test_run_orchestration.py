"""Starting runs and renting their pods (issue 6): the budget check, provisioning that never
rents twice, and the reconcile pass — with the local provider (agent processes stand in for
pods; a stand-in agent that only waits, so nothing here benchmarks anything)."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pytest
from django.utils import timezone

from agents import protocol
from runs.models import AuditEvent, Budget, Run
from runs.models.runs import RunState
from runs.providers.base import PodSpec, TransientProviderError, pod_name
from runs.providers.registry import local_provider
from runs.run_as_started import run_planned_trials
from runs.services.budgets import budget_set
from runs.services.provisioning import run_provision
from runs.services.reconcile import runs_reconcile

from .conftest import SYSTEM, frozen, make_experiment, make_model
from .db_state import database_state as snapshot

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("waiting_local_pods")]


def start(person, experiment, **body):
    return person.client().post(
        f"/api/v1/orgs/{person.org.slug}/runs/",
        {"experiment": str(experiment.id), **body},
        format="json",
    )


def test_a_started_run_gets_one_pod_and_an_audit_event(alice, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = start(alice, experiment, reason="commit abc123", trigger="ci")
    assert len(callbacks) == 1  # provisioning is enqueued after the commit, once
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["state"], body["trigger"]) == ("queued", "ci")  # as committed
    run = Run.objects.get(id=body["id"])
    assert (run.state, run.provider) == ("provisioning", "local")
    assert run.pod_id == pod_name(run.id) and run.pod_started_at is not None
    assert run.price_usd_hr is None  # a local pod rents nothing
    assert [trial.serve_config for trial in run_planned_trials(run)] == protocol.expand_serve_grid(
        experiment.serve_grid
    )
    assert run.run_token_hash  # the pod's agent holds the matching token
    assert [pod.name for pod in local_provider().list_bench_pods()] == [run.pod_id]
    event = AuditEvent.objects.get(event="run.start")
    assert event.after["reason"] == "commit abc123"


def test_provisioning_delivered_twice_or_after_a_crash_rents_exactly_one_pod(alice):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    assert run_provision(run_id=run.id, owner="worker-1") == "created"
    assert run_provision(run_id=run.id, owner="worker-2") == "skipped"
    # A worker killed after the create but before its write: the pod exists, the row does
    # not know it, the lease has run out.
    Run.objects.filter(id=run.id).update(
        pod_id="", lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert run_provision(run_id=run.id, owner="worker-3") == "adopted"
    assert [pod.name for pod in local_provider().list_bench_pods()] == [pod_name(run.id)]
    run.refresh_from_db()
    assert run.pod_id == pod_name(run.id)


def test_a_redelivered_message_takes_over_its_dead_workers_lease_at_once(alice):
    """The broker hands a message out again only when its worker is gone: the redelivery
    need not wait out the lease. Another message must."""
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    lease = timezone.now() + datetime.timedelta(minutes=5)
    Run.objects.filter(id=run.id).update(
        state=RunState.PROVISIONING, lease_owner="host-a:task-1", lease_expires_at=lease
    )
    assert run_provision(run_id=run.id, owner="host-b:task-2", task_id="task-2") == "skipped"
    assert run_provision(run_id=run.id, owner="host-b:eager") == "skipped"
    assert run_provision(run_id=run.id, owner="host-b:task-1", task_id="task-1") == "created"
    assert [pod.name for pod in local_provider().list_bench_pods()] == [pod_name(run.id)]
    # Once the pod is recorded, not even its own message provisions again.
    assert run_provision(run_id=run.id, owner="host-c:task-1", task_id="task-1") == "skipped"


def test_a_run_over_the_experiment_cap_is_refused_and_nothing_is_written(alice):
    experiment = make_experiment(alice.org, budget_cap_usd=Decimal("0.01"))
    before = snapshot()
    response = start(alice, experiment)
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["budget"][0]
    assert "exceeds the experiment's cap $0.01" in message and "estimated cost $" in message
    assert snapshot() == before
    assert local_provider().list_bench_pods() == []


def test_a_run_over_the_month_budget_is_refused_naming_the_numbers(alice):
    experiment = make_experiment(alice.org)
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal("0.50"))
    before = snapshot()
    response = start(alice, experiment)
    assert response.status_code == 400
    message = response.json()["error"]["fields"]["budget"][0]
    assert "budget for" in message and "$0.50" in message and "$0.00 spent" in message
    assert snapshot() == before


def test_a_simulated_run_needs_no_budget(alice, django_capture_on_commit_callbacks):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    Budget.objects.create(organization=alice.org, limit_usd=Decimal(0))
    with django_capture_on_commit_callbacks(execute=True):
        assert start(alice, experiment).status_code == 201


def test_bad_start_requests_name_the_field(alice, charlie):
    foreign = make_experiment(charlie.org, model=make_model(charlie.org), name="theirs")
    before = snapshot()
    for body, field in (
        ({"experiment": str(foreign.id)}, "experiment"),
        ({"experiment": str(uuid.uuid4())}, "experiment"),
        ({"experiment": "nope"}, "experiment"),
        ({"experiment": str(foreign.id), "reason": 5}, "reason"),
        ({"experiment": str(foreign.id), "trigger": "cron"}, "trigger"),
    ):
        response = alice.client().post(f"/api/v1/orgs/{alice.org.slug}/runs/", body, format="json")
        assert response.status_code == 400, body
        assert field in response.json()["error"]["fields"], (body, response.json())
    assert snapshot() == before


def _running(org, **experiment) -> Run:
    started = make_experiment(org, name=f"e-{uuid.uuid4()}", **experiment)
    run = Run.objects.create(
        organization=org, experiment=started, **frozen(started, budget_cap_usd="50")
    )
    assert run_provision(run_id=run.id, owner="w") == "created"
    Run.objects.filter(id=run.id).update(
        state=RunState.BENCHMARKING, last_heartbeat_at=timezone.now()
    )
    return Run.objects.get(id=run.id)


def test_reconcile_fails_a_silent_run_and_terminates_its_pod(alice, settings):
    settings.BENCHSITE_MAX_RESUMES = 0  # resume off: what a run with none left does
    run = _running(alice.org)
    later = timezone.now() + datetime.timedelta(minutes=10)
    report = runs_reconcile(now=later)
    run.refresh_from_db()
    assert str(run.id) in report.failed and run.state == "failed"
    assert "fell silent" in run.failure_reason
    assert str(run.id) in report.released and run.pod_terminated_at is not None
    assert local_provider().list_bench_pods() == []


def test_reconcile_stops_a_run_at_its_budget_cap_and_bills_it(alice):
    run = _running(alice.org)
    # $3.00/h (the world's catalogue price is 3.99 secure; the row says what was billed).
    Run.objects.filter(id=run.id).update(
        price_usd_hr=Decimal("3.00"),
        pod_started_at=timezone.now() - datetime.timedelta(hours=20),
        last_heartbeat_at=timezone.now(),
    )
    report = runs_reconcile()
    run.refresh_from_db()
    assert run.state == "over_budget" and str(run.id) in report.over_budget
    assert run.cost_usd >= Decimal("50")  # 20 h × $3.00 = $60.00 (plus the pass's seconds)
    assert local_provider().list_bench_pods() == []


def test_reconcile_ends_a_cancelled_run_whose_agent_never_confirmed(alice):
    run = _running(alice.org)
    Run.objects.filter(id=run.id).update(
        cancel_requested_at=timezone.now() - datetime.timedelta(minutes=5), cancel_reason="stop"
    )
    runs_reconcile()
    run.refresh_from_db()
    assert run.state == "cancelled" and run.pod_terminated_at is not None
    assert local_provider().list_bench_pods() == []


def test_reconcile_terminates_pods_no_active_run_owns(alice):
    provider = local_provider()
    stray = pod_name(uuid.uuid4())
    provider.create(
        PodSpec(name=stray, image="x", gpu_type_id="g", gpu_count=1, cloud_type="SECURE", env={})
    )
    owned = _running(alice.org)
    report = runs_reconcile()
    assert report.orphans_terminated == [stray]
    assert [pod.name for pod in provider.list_bench_pods()] == [owned.pod_id]


def test_reconcile_reprovisions_a_run_whose_task_was_lost(alice, monkeypatch):
    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    run = Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        **frozen(experiment),
        created_at=timezone.now() - datetime.timedelta(minutes=5),
    )
    enqueued = []
    monkeypatch.setattr(
        "runs.services.reconcile.enqueue_after_commit", lambda *task: enqueued.append(task)
    )
    assert runs_reconcile().reprovisioned == [] and enqueued == []  # a pass that only looks
    report = runs_reconcile(reprovision=True)
    assert enqueued == [("runs.tasks.run_provision", str(run.id))]
    assert report.reprovisioned == [str(run.id)]


@pytest.fixture
def retries_run_in_process():
    """Eager tasks re-run on ``retry()`` (no countdown) when errors do not propagate."""
    from benchsite.celery import app

    app.conf.task_eager_propagates = False
    yield
    app.conf.task_eager_propagates = True


def test_the_provision_task_retries_transient_errors_then_gives_up(
    alice, monkeypatch, retries_run_in_process
):
    import runs.tasks

    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    calls = []

    def no_capacity(*, run_id, owner, task_id):
        calls.append(owner)
        raise TransientProviderError("no instances available", no_capacity=True)

    monkeypatch.setattr(runs.tasks, "provision_service", no_capacity)
    assert runs.tasks.run_provision.apply(args=[str(run.id)]).get() == "failed"
    assert len(calls) == runs.tasks.MAX_RETRIES + 1
    run.refresh_from_db()
    assert run.state == "failed" and "no instances available" in run.failure_reason
    assert f"after {runs.tasks.MAX_RETRIES + 1} attempts" in run.failure_reason


def test_the_provision_task_succeeds_once_capacity_returns(
    alice, monkeypatch, retries_run_in_process
):
    import runs.tasks

    experiment = make_experiment(alice.org, engine="sim", engine_image_tag="")
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    real, calls = runs.tasks.provision_service, []

    def flaky(*, run_id, owner, task_id):
        calls.append(owner)
        if len(calls) < 3:
            raise TransientProviderError("429 Too Many Requests")
        return real(run_id=run_id, owner=owner, task_id=task_id)

    monkeypatch.setattr(runs.tasks, "provision_service", flaky)
    assert runs.tasks.run_provision.apply(args=[str(run.id)]).get() == "created"
    assert len(calls) == 3
    assert [pod.name for pod in local_provider().list_bench_pods()] == [pod_name(run.id)]


def test_retry_delays_back_off_with_jitter_and_stay_below_the_visibility_timeout():
    import runs.tasks

    for retries in range(runs.tasks.MAX_RETRIES + 1):
        ceiling = min(runs.tasks.RETRY_MAX_SECONDS, runs.tasks.RETRY_BASE_SECONDS * 2**retries)
        delays = [runs.tasks._retry_delay(retries) for _ in range(200)]
        assert all(0 <= delay <= ceiling for delay in delays)
        assert len(set(delays)) > 100  # jittered, not a fixed schedule
    assert runs.tasks.RETRY_MAX_SECONDS < 3600  # the broker's visibility timeout
