"""Runs with a real Celery worker process (issue 6): tasks travel over Redis, not in process.

A run started through the API is provisioned by the worker (``run_provision`` enqueued after
the commit), its simulated agent streams into Daphne, the run succeeds, and ``run_finalize``
(enqueued by ingest in Daphne's process) gives the pod back; ``runs_reconcile`` sent over the
broker terminates a stray pod. Then a worker SIGKILLed right after renting a pod: the next
worker adopts that pod (exactly one), and the killed delivery, redelivered, does nothing.

Each test has its own queue on the shared Redis (``CELERY_TASK_DEFAULT_QUEUE``, for this
process, Daphne and the workers) and removes it afterwards, with any message of it left
unacknowledged.
"""

from __future__ import annotations

import datetime
import os
import re
import signal
import sys
import uuid

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from benchsite.celery import app as celery_app
from runs.models import Measurement, Run
from runs.models.runs import TERMINAL_RUN_STATES, RunState
from runs.providers.base import PodSpec, pod_name
from runs.providers.registry import local_provider
from runs.tasks import runs_reconcile
from tests.polling import wait_for

from .conftest import make_experiment, make_model
from .live_server import broker_queue_delete, celery_worker, daphne_server, unacked_messages

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]

WAITING_AGENT = f"{sys.executable} -c 'import time; time.sleep(300)'"
SIM_EXPERIMENT = {
    "engine": "sim",
    "engine_image_tag": "",
    "serve_grid": {"max_num_seqs": [8, 2]},
    "workload": {
        "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
        "concurrency": [1, 4],
        "requests_per_level": 8,
    },
    # Judged at p50, which a level of 8 requests can judge (a p99 needs 299): these tests
    # are about the run's way through the worker, not about windows.
    "slos": {"ttft_ms": 2000, "ttft_percentile": 50},
}


@pytest.fixture
def broker_queue(monkeypatch):
    """Tasks go over Redis to this test's own queue, from this process and from the servers
    and workers it starts; afterwards the queue and its messages are gone from Redis."""
    if not django_settings.REDIS_URL:
        pytest.fail("a real worker needs Redis: set REDIS_URL (see tests/service_env.py)")
    queue = f"benchsite-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("CELERY_TASK_DEFAULT_QUEUE", queue)
    conf = celery_app.conf
    saved = conf.task_always_eager, conf.task_default_queue
    conf.task_always_eager, conf.task_default_queue = False, queue
    try:
        yield queue
    finally:
        conf.task_always_eager, conf.task_default_queue = saved
        broker_queue_delete(queue)


@pytest.fixture
def pods_dir(settings, tmp_path):
    """The local provider's records, shared by this process and the workers; any pod still
    up afterwards is terminated."""
    settings.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    settings.BENCHSITE_LOCAL_AGENT_COMMAND = WAITING_AGENT  # for pods this process makes
    yield tmp_path / "pods"
    provider = local_provider()
    for pod in provider.list_bench_pods():
        provider.terminate(pod.pod_id)


def worker_env(pods_dir, **extra) -> dict[str, str]:
    return {"BENCHSITE_PROVIDER": "local", "BENCHSITE_LOCAL_PODS_DIR": str(pods_dir), **extra}


def tasks_done(log_path, task: str) -> list[str]:
    """What each finished ``task`` returned, from the worker's log."""
    pattern = rf"Task runs\.tasks\.{task}\[[0-9a-f-]+\] succeeded in [0-9.]+s: (.*)"
    return re.findall(pattern, log_path.read_text())


def start_run(person, experiment) -> Run:
    response = person.client().post(
        f"/api/v1/orgs/{person.org.slug}/runs/",
        {"experiment": str(experiment.id), "reason": "worker test"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["state"] == "queued"  # as committed; the worker does the rest
    return Run.objects.get(id=response.json()["id"])


def test_it_runs_a_started_run_on_a_real_worker_from_provisioning_to_a_released_pod(
    alice, broker_queue, pods_dir, tmp_path, settings
):
    log = tmp_path / "worker.log"
    settings.BENCHSITE_SIM_SPEED = 10  # frozen into the run's job where it starts: here
    experiment = make_experiment(alice.org, model=make_model(alice.org), **SIM_EXPERIMENT)
    with (
        daphne_server() as address,
        celery_worker(
            log,
            # No delivery grace: an agent still stopping 10 s after the ask (a busy machine)
            # is killed, not left listed until the next pass (test_run_end_settling).
            env=worker_env(
                pods_dir,
                BENCHSITE_PUBLIC_URL=f"http://{address}",
                BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS="0",
            ),
        ),
    ):
        run = start_run(alice, experiment)

        def ended():
            run.refresh_from_db()
            return run.state in TERMINAL_RUN_STATES

        wait_for(ended, 240, "the run to end")
        agent_log = pods_dir / pod_name(run.id) / "agent.log"
        assert run.state == "succeeded", (run.failure_reason, agent_log.read_text()[-3000:])
        assert (run.provider, run.pod_id) == ("local", pod_name(run.id))
        assert Measurement.objects.filter(trial__run=run).count() == 4
        # run_finalize, enqueued by ingest in Daphne when the run ended, ran on the worker:
        # nothing else gives a pod back here (no beat, no reconcile yet).
        wait_for(lambda: tasks_done(log, "run_finalize"), 60, "the worker to finalize")
        assert tasks_done(log, "run_provision") == ["'created'"]  # delivered once
        assert tasks_done(log, "run_finalize") == ["True"]
        run.refresh_from_db()
        assert run.pod_terminated_at is not None
        assert local_provider().list_bench_pods() == []

        # A pod no run owns (here made by hand); reconcile over the broker reaps it.
        stray = pod_name(uuid.uuid4())
        local_provider().create(
            PodSpec(
                name=stray, image="x", gpu_type_id="g", gpu_count=1, cloud_type="SECURE", env={}
            )
        )
        runs_reconcile.delay()
        wait_for(lambda: tasks_done(log, "runs_reconcile"), 60, "the worker to reconcile")
        assert local_provider().list_bench_pods() == []
        (summary,) = tasks_done(log, "runs_reconcile")
        assert "'orphans_terminated': 1" in summary and "'errors': 0" in summary


def test_it_leaves_exactly_one_pod_when_a_worker_dies_right_after_renting_it(
    alice, broker_queue, pods_dir, tmp_path
):
    rented = tmp_path / "rented"
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    experiment = make_experiment(alice.org, model=make_model(alice.org), **SIM_EXPERIMENT)
    env = worker_env(pods_dir, BENCHSITE_LOCAL_AGENT_COMMAND=WAITING_AGENT)
    with celery_worker(
        first_log,
        app="tests.site.worker_hangs_after_renting",
        env=env | {"BENCHSITE_TEST_RENTED_MARKER": str(rented)},
    ) as first:
        run = start_run(alice, experiment)
        wait_for(rented.exists, 60, "the first worker to rent the pod")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(10)

    # The pod is up, the run does not know it, and its lease still stands.
    run.refresh_from_db()
    assert (run.state, run.pod_id) == (RunState.PROVISIONING, "")
    assert run.lease_expires_at > timezone.now()
    token_hash = run.run_token_hash
    assert token_hash  # issued before the create: the pod's agent holds a valid token
    assert [pod.name for pod in local_provider().list_bench_pods()] == [pod_name(run.id)]
    with celery_app.connection_for_write() as connection:
        channel = connection.default_channel
        (killed,) = unacked_messages(
            channel, broker_queue
        ).items()  # Redis still holds the delivery
        killed_tag, killed_task = killed[0], killed[1]["headers"]["id"]

        with celery_worker(second_log, env=env):
            # Five minutes on (the lease): reconcile, sent over the broker, re-enqueues the
            # run, and the second worker adopts the pod it finds under the run's name.
            past = timezone.now() - datetime.timedelta(minutes=6)
            Run.objects.filter(id=run.id).update(lease_expires_at=past, created_at=past)
            runs_reconcile.delay()
            wait_for(lambda: tasks_done(second_log, "run_provision"), 60, "the adoption")
            assert tasks_done(second_log, "run_provision") == ["'adopted'"]
            # An hour on (the visibility timeout), Redis gives the killed delivery to a
            # worker again; it finds the run provisioned and does nothing. Restored here by
            # kombu itself, for this queue only: a worker with a short visibility timeout
            # would restore other tests' deliveries from the shared Redis too.
            channel.qos.restore_by_tag(killed_tag, leftmost=True)
            wait_for(
                lambda: (
                    killed_task in second_log.read_text()
                    and len(tasks_done(second_log, "run_provision")) == 2
                ),
                60,
                "the redelivered task",
            )
            assert tasks_done(second_log, "run_provision") == ["'adopted'", "'skipped'"]
            assert re.search(rf"run_provision\[{killed_task}\] succeeded", second_log.read_text())
        assert unacked_messages(channel, broker_queue) == {}
        assert channel.client.llen(broker_queue) == 0

    run.refresh_from_db()
    assert (run.state, run.pod_id) == (RunState.PROVISIONING, pod_name(run.id))
    assert run.lease_owner == "" and run.run_token_hash == token_hash
    assert [pod.name for pod in local_provider().list_bench_pods()] == [pod_name(run.id)]
