"""Shared cast and helpers.

alice owns org A ("acme"); bob is a viewer in A; mallory is a member of A; charlie owns org B
("globex"). Each person has an API token for their organization.
"""

from __future__ import annotations

import contextlib
import os
import tempfile

import pytest

from tests import db_template

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
# The settings each parallel worker sets for itself and what it starts (pytest_configure); a
# test of the settings' own defaults starts its process without them.
WORKER_OWN_SETTINGS = ("CELERY_TASK_DEFAULT_QUEUE", "CHANNEL_LAYER_PREFIX", "MEDIA_ROOT")


def pytest_configure(config):
    """Parallel test workers (``pytest -n N``, pytest-xdist) share one PostgreSQL server (each
    its own test database: pytest-django names it per worker) and one Redis: each also gets a
    Celery queue, a channel-layer prefix and a media folder (local pods, uploads) of its own,
    here and in every server or worker a test starts (they inherit the environment), so no
    worker's reconcile pass sweeps another's pods nor takes its tasks."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        db_template.name_the_lock()
        return
    own = dict(
        zip(
            WORKER_OWN_SETTINGS,
            (
                f"benchsite-test-{worker}",
                f"asgi-test-{worker}",
                tempfile.mkdtemp(prefix=f"benchsite-media-{worker}-"),
            ),
            strict=True,
        )
    )
    os.environ.update(own)
    if not config.pluginmanager.hasplugin("django"):  # the agents' suite runs without Django
        return
    from django.conf import settings

    settings.CELERY_TASK_DEFAULT_QUEUE = own["CELERY_TASK_DEFAULT_QUEUE"]
    settings.CHANNEL_LAYER_PREFIX = own["CHANNEL_LAYER_PREFIX"]
    if "prefix" in settings.CHANNEL_LAYERS["default"].get("CONFIG", {}):
        settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = own["CHANNEL_LAYER_PREFIX"]
    settings.MEDIA_ROOT = own["MEDIA_ROOT"]
    from benchsite.celery import app

    app.conf.task_default_queue = own["CELERY_TASK_DEFAULT_QUEUE"]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    # In the controller, once every worker has ended (and dropped its copy).
    config = session.config
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.pluginmanager.hasplugin("django"):
        return
    from pytest_django.plugin import blocking_manager_key

    with config.stash[blocking_manager_key].unblock():
        db_template.drop_template()


@pytest.fixture(scope="session")
def django_db_setup(
    request,
    django_test_environment,
    django_db_blocker,
    django_db_modify_db_settings,
    django_db_use_migrations,
    django_db_keepdb,
    django_db_createdb,
):
    """pytest-django's test databases, but a parallel worker's is a copy of one template
    migrated once per run (tests/db_template.py); anything else is set up as pytest-django
    does (its fixture of this name, step by step)."""
    from django.test.utils import setup_databases, teardown_databases
    from pytest_django.fixtures import _disable_migrations, _get_databases_for_setup

    verbosity = request.config.option.verbose
    aliases, serialized_aliases = _get_databases_for_setup(request.session.items)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    applies = (
        django_db_use_migrations
        and not django_db_keepdb
        and aliases <= {"default"}
        and not serialized_aliases
    )
    with django_db_blocker.unblock():
        copied = worker and db_template.setup(worker, verbosity=verbosity, applies=applies)
        if copied:
            next(copied)
    if copied:
        yield
        with django_db_blocker.unblock(), _warned_on_failure(request):
            next(copied, None)
        return
    if not django_db_use_migrations:
        _disable_migrations()
    keepdb = {"keepdb": True} if django_db_keepdb and not django_db_createdb else {}
    with django_db_blocker.unblock():
        databases = setup_databases(
            verbosity=verbosity,
            interactive=False,
            aliases=aliases,
            serialized_aliases=serialized_aliases,
            **keepdb,
        )
    yield
    if not django_db_keepdb:
        with django_db_blocker.unblock(), _warned_on_failure(request):
            teardown_databases(databases, verbosity=verbosity)


@contextlib.contextmanager
def _warned_on_failure(request):
    """A test database that cannot be dropped (a connection some test left open) is a
    warning, as pytest-django makes it, not an error of the last test."""
    try:
        yield
    except Exception as exc:
        request.node.warn(
            pytest.PytestWarning(f"Error when trying to teardown test databases: {exc!r}")
        )


def pytest_collection_modifyitems(config, items):
    # Outside CI a missing Redis skips its tests; in CI it must fail them (see service_env.py).
    if IN_CI or os.environ.get("REDIS_URL"):
        return
    skip = pytest.mark.skip(reason="Redis not reachable (REDIS_URL unset); runs in CI")
    for item in items:
        if "needs_redis" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sim_over_http(monkeypatch):
    """Agents this test starts (in its process, or as subprocesses that inherit its
    environment) serve the simulator over HTTP in wall time (``BENCHSITE_SIM_OVER_HTTP``)
    instead of computing it in its own time: for tests of what happens *during* a run — a
    cancel, a deadline, a pod or site lost mid-level, a Ctrl-C — which need a run that lasts,
    as a GPU's does."""
    monkeypatch.setenv("BENCHSITE_SIM_OVER_HTTP", "1")
