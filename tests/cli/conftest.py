"""The CLI's tests: it runs as its own process (``python -m benchsite_cli``) against a live
Daphne server on the test database, exactly as a CI job would reach the site."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

from tests.site.conftest import (  # noqa: F401  (the cast and the site's autouse fixtures)
    alice,
    celery_tasks_run_in_process,
    charlie,
    isolated_media_and_cheap_hashing,
    mallory,
    org_a,
    org_b,
)
from tests.site.live_server import ROOT
from tests.site.test_celery_worker import broker_queue, pods_dir  # noqa: F401  (a real worker)


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def benchsite(*args: str, url: str, token: str, org: str = "acme", timeout=300) -> Result:
    """Runs the CLI as a process, with the settings a CI job would give it."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("BENCHSITE_")},
        "BENCHSITE_URL": url,
        "BENCHSITE_TOKEN": token,
        "BENCHSITE_ORG": org,
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchsite_cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Result(done.returncode, done.stdout, done.stderr)
