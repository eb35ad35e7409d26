"""The agent package must import on a machine without Django (it runs inside GPU pods)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

BLOCKER = """
import importlib.abc, sys
FORBIDDEN = {"django", "rest_framework", "celery", "channels", "runs", "benchsite"}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in FORBIDDEN:
            raise ImportError(f"agents imported {name}")
sys.meta_path.insert(0, Block())
import importlib, pkgutil, agents
# A __main__ module is a program: importing it would run it.
names = [m.name for m in pkgutil.walk_packages(agents.__path__, "agents.")
         if not m.name.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
print(len(names) + 1)
"""


@pytest.mark.slow
def test_it_imports_every_agents_module_without_the_site_or_django():
    result = subprocess.run(
        [sys.executable, "-c", BLOCKER], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    imported = int(result.stdout.strip())
    modules = pkgutil.walk_packages([str(ROOT / "agents")], "agents.")
    expected = 1 + len([m for m in modules if not m.name.endswith(".__main__")])
    assert imported == expected


def test_the_blocker_really_blocks():
    # Guard against a blocker that lets everything through (the test above would then be void).
    probe = BLOCKER.replace("import importlib, pkgutil, agents", "import django  # noqa")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode != 0
    assert "agents imported django" in result.stderr
