"""A Celery worker and beat in threads of this process: the demo's (``manage.py demo_run``).

Guarantees:
- the worker takes the app's tasks from the app's broker and queues (the default one and the
  notifications' one, ``benchsite.queues``), with the app's settings (acks late, retries),
  exactly the tasks a ``celery worker`` process takes; it runs them in a pool of threads,
  where Celery enforces no time limits (they need a prefork pool);
- beat sends the app's ``CELERY_BEAT_SCHEDULE`` (reconcile, price refresh, audit walk) and
  the experiments' schedules as ``celery beat`` does, with the scheduler the settings name
  (django-celery-beat's: the schedule is kept in the site's database);
- ``start`` returns once the worker consumes, or raises ``RuntimeError``;
- ``stop`` ends beat, then the worker after the tasks it is running (a warm shutdown), and
  waits at most ``timeout`` seconds for both; it is idempotent and raises nothing.

The worker answers no remote control: its pidbox queue would outlive it in a folder broker.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from celery import Celery
from celery.beat import EmbeddedService
from celery.worker import state as worker_state


class EmbeddedWorker:
    """One worker and one beat, started and stopped together (see the module docstring)."""

    def __init__(self, app: Celery, *, state_path: Path, concurrency: int = 2):
        self.app = app
        # Beat's local state file (the schedule itself is in the database): kept out of the
        # working directory.
        self.state_path = Path(state_path)
        self.concurrency = concurrency
        self._ready = threading.Event()
        self._worker = None
        self._worker_thread: threading.Thread | None = None
        self._beat = None

    def start(self, timeout: float = 30) -> None:
        self.app.conf.worker_enable_remote_control = False
        self._worker = self.app.WorkController(
            hostname=f"embedded-{uuid.uuid4().hex[:8]}@%h",
            pool="threads",
            concurrency=self.concurrency,
            ready_callback=lambda consumer: self._ready.set(),
            # Alone on its broker: nobody to sync with, gossip to or send heartbeats to.
            without_mingle=True,
            without_gossip=True,
            without_heartbeat=True,
        )
        self._worker_thread = threading.Thread(
            target=self._worker.start, name="celery-worker", daemon=True
        )
        self._worker_thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise RuntimeError(f"the embedded Celery worker did not start within {timeout:g} s")
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        # Celery's embedded service defaults to its file scheduler; the app names the
        # database's (django-celery-beat), which also fires the experiments' schedules.
        self._beat = EmbeddedService(
            self.app,
            thread=True,
            schedule_filename=str(self.state_path),
            scheduler_cls=self.app.conf.beat_scheduler,
        )
        self._beat.start()

    def stop(self, timeout: float = 15) -> None:
        beat, self._beat = self._beat, None
        if beat is not None:
            # Beat reads this at least every second (an embedded beat's longest sleep).
            beat.service.stop()
            beat.join(min(timeout, 5))
        thread, self._worker_thread = self._worker_thread, None
        if thread is not None:
            # The worker's loop reads this between two polls of the broker and shuts down
            # warm: it finishes its running tasks and acknowledges them.
            worker_state.should_stop = 0
            thread.join(timeout)
            worker_state.should_stop = None
