"""Shared cast and helpers.

alice owns org A ("acme"); bob is a viewer in A; mallory is a member of A; charlie owns org B
("globex"). Each person has an API token for their organization.
"""

from __future__ import annotations

import os
import tempfile

import pytest

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
