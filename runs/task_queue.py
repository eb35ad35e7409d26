"""Enqueuing Celery tasks by name, once the transaction at hand commits.

Guarantees of ``enqueue_after_commit``:
- nothing is sent before the commit, so a rolled-back change never rents a GPU, terminates a
  pod or sends a notice; outside a transaction the task is sent at once;
- a task is named by its dotted name (``runs.tasks.run_provision``): code that enqueues never
  imports the module of the tasks, which imports the services (import-linter holds it);
- an unknown name raises at once, inside the caller's transaction (a typo is a bug, not a
  lost message); a broker that cannot be reached after the commit is logged and the change
  stands: every task here has a safety net that sends it again (``runs_reconcile``,
  ``notifications_sweep``). Anything else raises (a task run in process, as in tests and
  eager mode, raises its own errors).
"""

from __future__ import annotations

import functools
import importlib
import logging

from celery import current_app
from celery.app.task import Task
from django.db import transaction
from kombu.exceptions import OperationalError

logger = logging.getLogger(__name__)


def _task(name: str) -> Task:
    """The registered task ``name``. A process that has not imported its module yet (the web
    process) imports it here, at run time: the module registers its tasks with Celery."""
    if name not in current_app.tasks:
        importlib.import_module(name.rpartition(".")[0])
    return current_app.tasks[name]


def enqueue_after_commit(name: str, *args: str) -> None:
    """Sends the task ``name`` with ``args`` (ids, as text) once the current transaction
    commits (see the module docstring)."""
    task = _task(name)
    transaction.on_commit(functools.partial(_send, task, args))


def _send(task: Task, args: tuple[str, ...]) -> None:
    try:
        task.delay(*args)
    except OperationalError:  # the broker: the change stands, the task's safety net resends
        logger.warning("could not enqueue %s%s", task.name, args, exc_info=True)
