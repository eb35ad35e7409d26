"""The test databases of a parallel run, migrated once: the first xdist worker to need one
migrates a template database, and every worker (that one included) gets a copy of it with
PostgreSQL's ``CREATE DATABASE … TEMPLATE``, in about a second instead of a migration of its
own (84 migrations here, every worker at once on two cores).

Guarantees:

- Each worker's database is what pytest-django would have made it: the same name
  (``test_<NAME>_gw<N>``), every migration applied and the cache table created, dropped when
  the worker ends. Only the way there differs.
- One template per run: the first worker makes it under the lock file the controller names
  (``BENCHSITE_TEST_DB_LOCK``), the others wait for it there; the controller drops it when
  the run ends (``drop_template``). A template left by a run that was killed is replaced by
  the next run's, never reused: each run migrates its own.
- Anything else — one process, SQLite, ``--reuse-db``, ``--nomigrations`` — goes through
  pytest-django's own setup unchanged (``DEFAULT_SETUP``).
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

LOCK_VARIABLE = "BENCHSITE_TEST_DB_LOCK"
# What setup() returns when the template does not apply: pytest-django's setup is used.
DEFAULT_SETUP = None


def name_the_lock() -> None:
    """In the controller of a run (before its workers start, which inherit the variable):
    the lock file that the workers' template setup shares."""
    if LOCK_VARIABLE not in os.environ:
        handle, path = tempfile.mkstemp(prefix="benchsite-test-db-", suffix=".lock")
        os.close(handle)
        os.environ[LOCK_VARIABLE] = path


def setup(worker: str, *, verbosity: int, applies: bool) -> Iterator[None] | None:
    """This worker's database copied from the run's template (made first if no worker has
    yet), as a generator that drops the copy when resumed; ``DEFAULT_SETUP`` when the
    template does not apply (``applies`` is False, not PostgreSQL, or no lock was named)."""
    from django.db import connection

    lock_path = os.environ.get(LOCK_VARIABLE)
    if not applies or connection.vendor != "postgresql" or not lock_path:
        return DEFAULT_SETUP
    return _copied(connection, worker, Path(lock_path), verbosity)


def _copied(connection, worker: str, lock_path: Path, verbosity: int) -> Iterator[None]:
    from django.conf import settings

    creation = connection.creation
    original_name = connection.settings_dict["NAME"]
    # pytest-django has named this worker's database test_<NAME>_<worker>; the template is
    # the name without the worker, and the copy's name comes back as it was.
    template = creation._get_test_db_name().removesuffix(f"_{worker}")
    with lock_path.open("r+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if lock.read() != template:
                connection.settings_dict["TEST"]["NAME"] = template
                creation.create_test_db(verbosity=verbosity, autoclobber=True, serialize=False)
                lock.seek(0)
                lock.write(template)
                lock.flush()
            connection.settings_dict["NAME"] = settings.DATABASES["default"]["NAME"] = template
            creation.clone_test_db(suffix=worker, verbosity=verbosity)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    creation.setup_worker_connection(worker)
    settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"]
    yield
    creation.destroy_test_db(original_name, verbosity=verbosity)


def drop_template() -> None:
    """In the controller, once every worker has ended: the template the run made, dropped,
    and its lock file removed."""
    lock_path = os.environ.get(LOCK_VARIABLE)
    if not lock_path or not Path(lock_path).exists():
        return
    template = Path(lock_path).read_text()
    Path(lock_path).unlink()
    if template:
        from django.db import connection

        connection.creation._destroy_test_db(template, verbosity=0)
