"""The Celery queues: the default one (``CELERY_TASK_DEFAULT_QUEUE``) for runs and pods, and
one for notifications beside it.

Guarantees:

- the notification tasks (a delivery, its retries, the sweep) are sent to the notifications
  queue, every other task to the default one, whoever sends them (the site, a worker, beat),
  so a flood of deliveries never stands in line before a pod's release;
- the notifications queue is named after the default one (``<default>.notifications``):
  deployments, and test runs, that keep apart on one Redis by their default queue keep their
  notifications apart too;
- a worker started without ``-Q`` takes from both queues (``worker_queues``, the settings'
  ``CELERY_TASK_QUEUES``); ``-Q <default>`` and ``-Q <default>.notifications`` split them
  between workers (docs/operating.md).
"""

from __future__ import annotations

NOTIFICATION_TASKS = frozenset(
    {"runs.tasks.notification_deliver", "runs.tasks.notifications_sweep"}
)


def notifications_queue(default_queue: str) -> str:
    """The notifications queue of the deployment whose default queue is ``default_queue``."""
    return f"{default_queue}.notifications"


def worker_queues(default_queue: str) -> dict[str, dict[str, str]]:
    """Celery's ``task_queues``: both queues, each on its own direct exchange."""
    return {
        name: {"exchange": name, "routing_key": name}
        for name in (default_queue, notifications_queue(default_queue))
    }


def task_route(name, args, kwargs, options, task=None, **extra) -> dict | None:
    """Celery's router (``CELERY_TASK_ROUTES``): a notification task's queue, or None (the
    default queue, as the app's configuration names it when the task is sent)."""
    if name not in NOTIFICATION_TASKS:
        return None
    from benchsite.celery import app  # the settings import this module; the app, them

    return {"queue": notifications_queue(app.conf.task_default_queue)}
