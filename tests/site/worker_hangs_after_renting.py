"""The project's Celery app for a worker that rents a local pod and then hangs before it can
record it on the run — the worst moment for a worker to die (``test_celery_worker.py`` starts
it with ``celery -A tests.site.worker_hangs_after_renting worker`` and SIGKILLs it there).

The file ``BENCHSITE_TEST_RENTED_MARKER`` names is written once the pod exists.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from benchsite.celery import app
from runs.providers.local import LocalProvider

_create = LocalProvider.create


def _create_then_hang(self, spec):
    pod = _create(self, spec)
    Path(os.environ["BENCHSITE_TEST_RENTED_MARKER"]).write_text(pod.pod_id)
    threading.Event().wait()  # until the test kills the worker (or the task's time limit)
    return pod


LocalProvider.create = _create_then_hang

__all__ = ["app"]
