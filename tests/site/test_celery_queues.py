"""Notifications have a Celery queue of their own (issue 32, finding 5): a thousand hooks'
deliveries never stand in line before a pod's release. Tasks are sent over the real Redis
broker to this test's queues (``broker_queue``) and read back from them there; a worker
started without ``-Q`` (as the demo's and the tests' are) takes from both."""

from __future__ import annotations

import base64
import json
import uuid

import pytest

from benchsite.celery import app as celery_app
from runs.tasks import (
    left_pod_release,
    notification_deliver,
    notifications_sweep,
    run_finalize,
    run_provision,
    runs_reconcile,
)
from tests.polling import wait_for

from .live_server import celery_worker
from .test_celery_worker import (
    broker_queue,  # noqa: F401 (a fixture, used by name)
    tasks_done,
)

pytestmark = pytest.mark.needs_redis


def queued_tasks(queue: str) -> list[str]:
    """The names of the tasks waiting in ``queue`` on the broker, in order of name."""
    with celery_app.connection_for_write() as connection:
        raw = connection.default_channel.client.lrange(queue, 0, -1)
    return sorted(json.loads(message)["headers"]["task"] for message in raw)


def test_notification_tasks_go_to_their_own_queue_and_the_rest_to_the_default_one(
    broker_queue,  # noqa: F811 (the fixture)
):
    some_id = str(uuid.uuid4())
    notification_deliver.delay(some_id)
    notification_deliver.apply_async((some_id,), countdown=0)  # a retry, as the task sends it
    notifications_sweep.delay()
    run_provision.delay(some_id)
    run_finalize.delay(some_id)
    left_pod_release.delay(some_id, "bench-x")
    runs_reconcile.delay()
    assert queued_tasks(f"{broker_queue}.notifications") == [
        "runs.tasks.notification_deliver",
        "runs.tasks.notification_deliver",
        "runs.tasks.notifications_sweep",
    ]
    assert queued_tasks(broker_queue) == [
        "runs.tasks.left_pod_release",
        "runs.tasks.run_finalize",
        "runs.tasks.run_provision",
        "runs.tasks.runs_reconcile",
    ]
    # The message of a delivery names the task and its delivery, as a worker reads them.
    with celery_app.connection_for_write() as connection:
        raw = connection.default_channel.client.lindex(f"{broker_queue}.notifications", -1)
    args, _kwargs, _embed = json.loads(base64.b64decode(json.loads(raw)["body"]))
    assert args == [some_id]


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_a_worker_started_without_q_takes_notifications_too(broker_queue, tmp_path):  # noqa: F811
    log = tmp_path / "worker.log"
    with celery_worker(log):
        notifications_sweep.delay()
        wait_for(lambda: tasks_done(log, "notifications_sweep"), 60, "the worker to sweep")
    assert tasks_done(log, "notifications_sweep") == ["0"]
    assert f"{broker_queue}.notifications" in log.read_text()  # in its banner's queues
