"""The CLI installs in CI images without the site: it must import without Django or runs."""

from __future__ import annotations

import subprocess
import sys

from tests.site.live_server import ROOT

BLOCKER = """
import importlib.abc, sys
FORBIDDEN = {"django", "rest_framework", "celery", "channels", "runs", "benchsite", "agents"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"the CLI imported {name}")
sys.meta_path.insert(0, Block())
import benchsite_cli.main, benchsite_cli.progress
sys.argv = ["benchsite", "--help"]
benchsite_cli.main.main()
"""


def test_it_imports_and_runs_without_django_or_the_site():
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "usage: benchsite" in result.stdout
