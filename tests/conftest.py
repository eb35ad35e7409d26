"""Shared cast and helpers.

alice owns org A ("acme"); bob is a viewer in A; mallory is a member of A; charlie owns org B
("globex"). Each person has an API token for their organization.
"""

from __future__ import annotations

import os

import pytest

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def pytest_collection_modifyitems(config, items):
    # Outside CI a missing Redis skips its tests; in CI it must fail them (see service_env.py).
    if IN_CI or os.environ.get("REDIS_URL"):
        return
    skip = pytest.mark.skip(reason="Redis not reachable (REDIS_URL unset); runs in CI")
    for item in items:
        if "needs_redis" in item.keywords:
            item.add_marker(skip)
