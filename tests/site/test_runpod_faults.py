"""Every fault the fake Runpod API can inject, driven through the real path (issue 6).

A run is started with ``POST …/runs/``; the ``run_provision`` task runs in-process after the
commit (a retry runs again at once: no broker, no countdown); the Runpod provider speaks to
``tests/fakes/runpod_api.py`` through the real SDK; ``runs_reconcile`` is the safety net.
Each test ends with the run in a concrete state AND no pod left in the fake's account. Pods
run a process that only waits, except where measurements must really arrive.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import sys
import threading
import types
from decimal import Decimal

import pytest
import requests
import runpod.api.graphql
from celery.exceptions import Retry
from django.db import connection
from django.utils import timezone

from runs import tasks
from runs.actors import Actor
from runs.costs import billed_seconds, run_cost_usd
from runs.models import Measurement, Run
from runs.providers.base import pod_name
from runs.providers.runpod import RunpodProvider
from runs.services import reconcile
from runs.services.credentials import provider_key_set
from runs.services.reconcile import runs_reconcile
from tests.fakes.runpod_api import CREATE
from tests.polling import wait_for

from .conftest import make_experiment, make_model
from .runpod_setup import (
    fake_runpod,
    post_run,
    runpod_site,
    store_runpod_key,
)

pytestmark = pytest.mark.django_db

KEY = "rpa_acme_faults_0123456789abcdef"
WAITING_AGENT = [sys.executable, "-c", "import time; time.sleep(300)"]
H100_SECURE = Decimal("3.99")  # the fake's costPerHr of one H100 in the secure cloud
SECOND = datetime.timedelta(seconds=1)
ATTEMPTS = tasks.MAX_RETRIES + 1


@pytest.fixture
def fake(monkeypatch, settings):
    """The fake Runpod API holding acme's account; its pods run a process that only waits."""
    with fake_runpod(
        (KEY,), agent_command=WAITING_AGENT, monkeypatch=monkeypatch, settings=settings
    ) as api:
        yield api


@pytest.fixture
def acme(alice, fake):
    """Alice, whose organization has set its Runpod key."""
    store_runpod_key(alice, KEY)
    return alice


@pytest.fixture
def retries_run_in_process():
    """In-process tasks run a retry at once, but only when errors do not propagate."""
    from benchsite.celery import app

    app.conf.task_eager_propagates = False
    yield
    app.conf.task_eager_propagates = True


@pytest.fixture
def short_client_timeout(monkeypatch):
    """The SDK waits 30 s per request; the same code path with 0.5 s keeps the test quick."""

    def post(*args, **kwargs):
        return requests.post(*args, **(kwargs | {"timeout": 0.5}))

    monkeypatch.setattr(
        runpod.api.graphql, "requests", types.SimpleNamespace(post=post, exceptions=requests)
    )


def small_experiment(org):
    return make_experiment(
        org,
        model=make_model(org),
        serve_grid={"max_num_seqs": [8]},
        workload={
            "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
            "concurrency": [1],
            "requests_per_level": 8,
        },
        slos={"ttft_ms": 2000},
    )


def start(person, capture) -> Run:
    """Starts a run through the API and runs what it enqueued after the commit."""
    with capture(execute=True):
        response = post_run(person, small_experiment(person.org), "faults")
    assert response.status_code == 201, response.json()
    return Run.objects.get(id=response.json()["id"])


def creates(fake) -> list:
    """The create mutations the fake received, in the order it answered them."""
    return [r for r in fake.requests if r.operation == CREATE]


def token_hash(pod) -> str:
    """The hash of the run token a pod's agent holds (what the site must have stored)."""
    return hashlib.sha256(pod.env["BENCHSITE_TOKEN"].encode()).hexdigest()


def cancel_and_reap(person, run: Run) -> None:
    """Ends a healthy run as a person would: cancel it; its agent (one that only waits) never
    confirms, so a reconcile pass after the grace ends it and gives its pod back."""
    response = person.client().post(
        f"/api/v1/orgs/{person.org.slug}/runs/{run.id}/cancel/", {"reason": "done"}, format="json"
    )
    assert response.status_code == 200, response.json()
    report = runs_reconcile(now=timezone.now() + reconcile.CANCEL_GRACE + SECOND)
    run.refresh_from_db()
    assert run.state == "cancelled" and str(run.id) in report.released
    assert run.pod_terminated_at is not None


def assert_billed(run: Run) -> None:
    """The run's cost is its pod's lifetime, rounded up to the second, at the pod's rate."""
    seconds = billed_seconds(run.pod_started_at, run.pod_terminated_at)
    assert Decimal(str(run.billed_seconds)) == seconds > 0
    assert run.price_usd_hr == H100_SECURE
    assert run.cost_usd == run_cost_usd(seconds=seconds, pod_usd_per_hr=H100_SECURE)


# ------------------------------------------------------------------------------------------
# Transient faults: bounded retries, then one pod or a clear failure
# ------------------------------------------------------------------------------------------


def test_it_fails_the_run_after_the_bounded_retries_when_runpod_has_no_capacity(
    acme, fake, django_capture_on_commit_callbacks, retries_run_in_process
):
    fake.inject("no_capacity", times=None)

    run = start(acme, django_capture_on_commit_callbacks)

    assert run.state == "failed"
    assert f"No pod after {ATTEMPTS} attempts" in run.failure_reason
    assert "no capacity" in run.failure_reason.lower()
    assert [(r.fault, r.pod_id) for r in creates(fake)] == [("no_capacity", None)] * ATTEMPTS
    assert run.pod_id == "" and fake.pods(KEY) == []
    assert runs_reconcile().orphans_terminated == []
    assert fake.pods(KEY) == []


@pytest.mark.parametrize("times", [1, 2])
@pytest.mark.parametrize("fault", ["rate_limited", "bad_gateway"])
def test_it_rents_exactly_one_pod_once_a_transient_fault_passes(
    acme, fake, fault, times, django_capture_on_commit_callbacks, retries_run_in_process
):
    fake.inject(fault, operation=CREATE, times=times)

    run = start(acme, django_capture_on_commit_callbacks)

    assert [r.fault for r in creates(fake)] == [fault] * times + [None]
    (pod,) = fake.pods(KEY)
    assert pod.name == pod_name(run.id)
    assert (run.state, run.provider, run.pod_id) == ("provisioning", "runpod", pod.id)
    assert token_hash(pod) == run.run_token_hash  # its agent will be let in
    cancel_and_reap(acme, run)
    assert fake.pods(KEY) == []


@pytest.mark.parametrize("times", [1, 2])
@pytest.mark.slow
def test_a_create_the_client_gave_up_on_leaves_one_pod_after_reconcile(
    acme,
    fake,
    times,
    short_client_timeout,
    django_capture_on_commit_callbacks,
    retries_run_in_process,
):
    # The client times out after 0.5 s; Runpod goes on and rents the pod 2 s after the ask,
    # when a later attempt has usually rented another one under the same name.
    fake.inject("slow", operation=CREATE, times=times, seconds=2)

    run = start(acme, django_capture_on_commit_callbacks)

    assert run.state == "provisioning" and run.pod_id
    wait_for(
        lambda: collections.Counter(r.fault for r in creates(fake))["slow"] == times,
        30,
        "Runpod to answer the creates the client gave up on",
    )
    pods = fake.pods(KEY)
    assert run.pod_id in {pod.id for pod in pods}
    assert {pod.name for pod in pods} == {pod_name(run.id)} and len(pods) <= times + 1
    # The pods the run did not record are nobody's: reconcile gives them back.
    report = runs_reconcile()
    assert [pod.id for pod in fake.pods(KEY)] == [run.pod_id]
    assert len(report.orphans_terminated) == len(pods) - 1
    run.refresh_from_db()
    assert run.state == "provisioning"  # the run keeps its own pod
    cancel_and_reap(acme, run)
    assert fake.pods(KEY) == []


@pytest.mark.slow
def test_a_pod_rented_late_by_an_earlier_attempt_is_adopted_with_a_token_the_site_accepts(
    acme,
    fake,
    monkeypatch,
    short_client_timeout,
    django_capture_on_commit_callbacks,
    retries_run_in_process,
):
    # Two creates time out; Runpod carries out the first one between the second attempt's
    # look-up and the third's, which adopts that pod.
    fake.inject("slow", operation=CREATE, times=2, seconds=1.5)
    real_find, lookups = RunpodProvider.find_by_name, []

    def find_by_name(self, name):
        lookups.append(name)
        if len(lookups) == 3:
            wait_for(lambda: fake.pods(KEY), 30, "Runpod to carry out the first create")
        return real_find(self, name)

    monkeypatch.setattr(RunpodProvider, "find_by_name", find_by_name)

    run = start(acme, django_capture_on_commit_callbacks)

    assert len(lookups) == 3  # the third attempt adopted what the first rented late
    wait_for(lambda: len(fake.pods(KEY)) == 2, 30, "Runpod to carry out the second create")
    first, second = sorted(fake.pods(KEY), key=lambda pod: pod.created_at)
    assert (run.state, run.pod_id) == ("provisioning", first.id)  # adopted, no third pod
    assert runs_reconcile().orphans_terminated == [second.name]
    cancel_and_reap(acme, run)
    assert fake.pods(KEY) == []
    # The adopted pod's agent is let in: every attempt handed out the run's one token.
    assert token_hash(first) == token_hash(second) == run.run_token_hash


# ------------------------------------------------------------------------------------------
# Permanent faults: the run fails at once, nothing is rented, nothing secret is shown
# ------------------------------------------------------------------------------------------


def test_it_fails_the_run_at_once_when_runpod_refuses_the_request(
    acme, fake, django_capture_on_commit_callbacks, retries_run_in_process
):
    fake.inject("invalid", operation=CREATE, message="gpuCount must be at most 8.")

    run = start(acme, django_capture_on_commit_callbacks)

    assert run.state == "failed"
    assert run.failure_reason == (
        f"Could not rent a pod: Runpod refused creating pod {pod_name(run.id)}: "
        "gpuCount must be at most 8."
    )
    assert [r.fault for r in creates(fake)] == ["invalid"]  # no retry
    assert fake.pods(KEY) == []


def test_it_fails_the_run_for_good_when_runpod_refuses_the_organizations_key(
    alice, fake, django_capture_on_commit_callbacks, retries_run_in_process
):
    revoked = "rpa_acme_revoked_fedcba9876543210"  # an account the fake does not know
    provider_key_set(
        actor=Actor(user=alice.user, via="web"), org=alice.org, provider="runpod", api_key=revoked
    )

    run = start(alice, django_capture_on_commit_callbacks)

    assert run.state == "failed"
    assert run.failure_reason == "Could not rent a pod: Runpod refused the API key"
    shown = alice.client().get(f"/api/v1/orgs/{alice.org.slug}/runs/{run.id}/")
    assert shown.status_code == 200 and revoked not in shown.content.decode()
    # One refused call (the look-up before any create), no retry, nothing rented anywhere.
    assert [(r.api_key, r.status) for r in fake.requests] == [(revoked, 401)]
    assert creates(fake) == [] and fake.pods(KEY) == []


# ------------------------------------------------------------------------------------------
# A create that errs but rents: adopted, or reaped when the run can no longer use it
# ------------------------------------------------------------------------------------------


def test_a_pod_left_by_a_failed_create_is_adopted_by_the_next_attempt(
    acme, fake, django_capture_on_commit_callbacks, retries_run_in_process
):
    fake.inject("create_leaves_pod")

    run = start(acme, django_capture_on_commit_callbacks)

    assert [r.fault for r in creates(fake)] == ["create_leaves_pod"]  # the retry rented none
    (pod,) = fake.pods(KEY)
    assert (run.state, run.pod_id, pod.name) == ("provisioning", pod.id, pod_name(run.id))
    assert token_hash(pod) == run.run_token_hash  # the token it was created with still holds
    cancel_and_reap(acme, run)
    assert fake.pods(KEY) == []


def test_a_pod_left_by_a_failed_create_of_a_run_cancelled_meanwhile_is_reaped(
    acme, fake, django_capture_on_commit_callbacks
):
    fake.inject("create_leaves_pod")
    # The first attempt fails; its retry waits in the broker (here: the Retry is raised).
    with pytest.raises(Retry), django_capture_on_commit_callbacks(execute=True):
        response = post_run(acme, small_experiment(acme.org), "faults")
    run = Run.objects.get(id=response.json()["id"])
    (pod,) = fake.pods(KEY)
    assert (run.state, run.pod_id, pod.name) == ("provisioning", "", pod_name(run.id))

    cancelled = acme.client().post(
        f"/api/v1/orgs/acme/runs/{run.id}/cancel/", {"reason": "wrong model"}, format="json"
    )
    assert cancelled.status_code == 200, cancelled.json()
    assert tasks.run_provision.apply(args=[str(run.id)]).get() == "skipped"  # the retry

    report = runs_reconcile(now=timezone.now() + reconcile.QUEUE_GRACE + SECOND)
    run.refresh_from_db()
    assert (run.state, run.failure_reason) == ("cancelled", "wrong model")
    assert report.orphans_terminated == [pod_name(run.id)]
    assert fake.pods(KEY) == []


def test_a_pod_left_by_the_last_failed_attempt_is_reaped(
    acme, fake, django_capture_on_commit_callbacks, retries_run_in_process
):
    fake.inject("no_capacity", times=tasks.MAX_RETRIES)
    fake.inject("create_leaves_pod")  # the last attempt rents a pod it never hears of

    run = start(acme, django_capture_on_commit_callbacks)

    assert run.state == "failed" and f"No pod after {ATTEMPTS} attempts" in run.failure_reason
    assert [r.fault for r in creates(fake)][-1] == "create_leaves_pod"
    (pod,) = fake.pods(KEY)
    assert pod.name == pod_name(run.id) and run.pod_id == ""
    report = runs_reconcile()
    assert report.orphans_terminated == [pod_name(run.id)]
    assert fake.pods(KEY) == []


# ------------------------------------------------------------------------------------------
# Pods that never start, or die
# ------------------------------------------------------------------------------------------


def test_reconcile_fails_a_run_whose_pod_never_starts_and_gives_the_pod_back(
    acme, fake, django_capture_on_commit_callbacks
):
    fake.inject("never_running")
    run = start(acme, django_capture_on_commit_callbacks)
    (pod,) = fake.pods(KEY)
    assert (run.state, run.pod_id, pod.runtime, pod.process) == (
        "provisioning",
        pod.id,
        False,
        None,
    )

    # Until the provision timeout the pod is given its time (images can be large).
    almost = run.pod_started_at + reconcile.PROVISION_TIMEOUT - datetime.timedelta(minutes=1)
    assert runs_reconcile(now=almost).failed == []
    assert [p.id for p in fake.pods(KEY)] == [pod.id]

    report = runs_reconcile(now=run.pod_started_at + reconcile.PROVISION_TIMEOUT + SECOND)
    run.refresh_from_db()
    assert run.state == "failed"
    assert run.failure_reason == (
        "The agent never reported: no word 1800 s after the pod was rented (the pod is pending)."
    )
    assert str(run.id) in report.failed and str(run.id) in report.released
    assert fake.pods(KEY) == []
    assert_billed(run)


def test_reconcile_fails_a_run_whose_pod_died_and_gives_the_pod_back(
    acme,
    fake,
    django_capture_on_commit_callbacks,
    settings,
):
    settings.BENCHSITE_MAX_RESUMES = 0  # resume off: what a run with none left does
    fake.inject("dies_after", seconds=0.2)
    run = start(acme, django_capture_on_commit_callbacks)
    assert run.state == "provisioning" and run.pod_id
    wait_for(lambda: [p.desired_status for p in fake.pods(KEY)] == ["EXITED"], 30, "the pod to die")
    # Right away the pod's agent may still be reporting: the run is left alone.
    assert runs_reconcile().failed == []

    report = runs_reconcile(now=timezone.now() + datetime.timedelta(seconds=31))
    run.refresh_from_db()
    assert (run.state, run.failure_reason) == ("failed", "The pod stopped before the run finished.")
    assert str(run.id) in report.released and fake.pods(KEY) == []
    assert_billed(run)


@pytest.mark.needs_redis
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("death", "reason"),
    [
        # Its host dies (SIGKILL): nothing is reported, reconcile notices the pod is gone.
        ("crash_pod", "The pod stopped before the run finished."),
        # It is stopped from outside (SIGTERM): the agent reports on its way out.
        ("exit_pod", "The pod stopped before the run finished (the agent received SIGTERM)."),
    ],
)
@pytest.mark.usefixtures("sim_over_http")
@pytest.mark.slow
def test_a_pod_that_dies_mid_run_fails_the_run_and_keeps_its_measurements(
    alice, settings, monkeypatch, tmp_path, death, reason
):
    settings.BENCHSITE_MAX_RESUMES = 0  # resume off: what a run with none left does
    with runpod_site(
        alice, KEY, monkeypatch=monkeypatch, settings=settings, tmp_path=tmp_path
    ) as fake:
        # Long enough that the pod dies with most of the work still to do.
        experiment = make_experiment(
            alice.org,
            model=make_model(alice.org),
            serve_grid={"max_num_seqs": [8, 4, 2]},
            workload={
                "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
                "concurrency": [1, 2, 4, 8],
                "requests_per_level": 16,
            },
            slos={"ttft_ms": 2000},
        )
        response = post_run(alice, experiment, "faults")
        assert response.status_code == 201, response.json()
        run = Run.objects.get(id=response.json()["id"])
        (pod,) = fake.pods(KEY)
        measured = Measurement.objects.filter(trial__run=run)
        wait_for(measured.exists, 120, "the first measurement")
        # What the site had stored when the pod died. A level the agent sent just before
        # may still land after the death (the site takes an ended run's late deliveries).
        kept = set(measured.values_list("id", flat=True))

        getattr(fake, death)(pod.id)

        report = runs_reconcile(now=timezone.now() + datetime.timedelta(seconds=31))
        run.refresh_from_db()
        assert (run.state, run.failure_reason) == ("failed", reason), fake.agent_log(pod.id)[-3000:]
        assert kept and kept <= set(measured.values_list("id", flat=True))
        assert str(run.id) in report.released and fake.pods(KEY) == []
        assert_billed(run)


# ------------------------------------------------------------------------------------------
# A worker killed after the create; provisioning delivered twice
# ------------------------------------------------------------------------------------------


class WorkerKilled(Exception):
    """Stands in for the worker process dying between the create and its database write."""


def test_a_worker_killed_after_the_create_is_redelivered_and_adopts_the_pod(
    acme, fake, monkeypatch, django_capture_on_commit_callbacks
):
    real_create = RunpodProvider.create

    def create_then_die(self, spec):
        real_create(self, spec)
        raise WorkerKilled

    monkeypatch.setattr(RunpodProvider, "create", create_then_die)
    asked_at = timezone.now()
    with pytest.raises(WorkerKilled), django_capture_on_commit_callbacks(execute=True):
        response = post_run(acme, small_experiment(acme.org), "faults")
    monkeypatch.setattr(RunpodProvider, "create", real_create)
    run = Run.objects.get(id=response.json()["id"])
    (pod,) = fake.pods(KEY)
    assert (run.state, run.pod_id) == ("provisioning", "")

    # The broker redelivers at once (acks_late): the dead worker's lease still holds.
    assert tasks.run_provision.apply(args=[str(run.id)]).get() == "skipped"
    assert len(fake.pods(KEY)) == 1
    # Once the lease has run out, reconcile delivers it again and the pod is adopted.
    Run.objects.filter(id=run.id).update(lease_expires_at=timezone.now() - SECOND)
    with django_capture_on_commit_callbacks(execute=True):
        report = runs_reconcile(
            now=timezone.now() + reconcile.QUEUE_GRACE + SECOND, reprovision=True
        )
    assert report.reprovisioned == [str(run.id)]
    run.refresh_from_db()
    assert (run.state, run.provider, run.pod_id) == ("provisioning", "runpod", pod.id)
    assert [p.id for p in fake.pods(KEY)] == [pod.id] and len(creates(fake)) == 1
    assert token_hash(pod) == run.run_token_hash  # the dead worker's token is the run's
    # Billed from the create that rented it, not from the adoption a lease later.
    assert asked_at <= run.pod_started_at <= pod.created_at
    assert tasks.run_provision.apply(args=[str(run.id)]).get() == "skipped"  # once more
    cancel_and_reap(acme, run)
    assert fake.pods(KEY) == []


@pytest.mark.django_db(transaction=True)
def test_provisioning_delivered_twice_at_once_rents_exactly_one_pod(acme, fake, monkeypatch):
    enqueued = []
    monkeypatch.setattr(tasks.run_provision, "delay", enqueued.append)  # the broker holds it
    response = post_run(acme, small_experiment(acme.org), "faults")
    assert response.status_code == 201, response.json()
    run_id = response.json()["id"]
    assert enqueued == [run_id]

    both_ready, outcomes = threading.Barrier(2), []

    def deliver():
        try:
            both_ready.wait(timeout=30)
            outcomes.append(tasks.run_provision.apply(args=[run_id]).get())
        finally:
            connection.close()  # each thread has its own connection

    workers = [threading.Thread(target=deliver) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)

    assert sorted(outcomes) == ["created", "skipped"]
    (pod,) = fake.pods(KEY)
    assert len(creates(fake)) == 1
    run = Run.objects.get(id=run_id)
    assert (run.pod_id, pod.name) == (pod.id, pod_name(run.id))
    cancel_and_reap(acme, run)
    assert fake.pods(KEY) == []
