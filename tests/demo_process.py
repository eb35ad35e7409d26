"""The demo as a user starts it, for the tests of ``make demo`` (sim and vLLM): a fresh
process on embedded defaults, whatever the test session itself was given."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS_ANSWER = ROOT / "docs" / "answer.md"
# What the test session may have set that the demo must not see: it runs on SQLite, with
# in-memory layers and pods under its own folder, as on a machine with no services.
_SESSION_ONLY = {"DATABASE_URL", "REDIS_URL", "BENCHSITE_LOCAL_PODS_DIR"}


def demo_env(tmp_path: Path, *, columns: int) -> dict[str, str]:
    """The environment of a demo whose database and media live under ``tmp_path``; tables
    are drawn ``columns`` wide."""
    env = {key: value for key, value in os.environ.items() if key not in _SESSION_ONLY}
    return env | {
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "MEDIA_ROOT": str(tmp_path / "media"),
        "COLUMNS": str(columns),
    }


def manage(*args: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    """``manage.py ARGS`` in the repository, output captured as text."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        **kwargs,
    )


def migrated_demo_env(tmp_path: Path, *, columns: int) -> dict[str, str]:
    """``demo_env`` with its database migrated, as ``make demo`` does first."""
    env = demo_env(tmp_path, columns=columns)
    migrate = manage("migrate", "--noinput", "-v0", env=env)
    assert migrate.returncode == 0, migrate.stderr
    return env


def demo_started(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``manage.py demo_run ARGS`` running in the background, as a user leaves it in a
    terminal, its output going to ``log``; in a session of its own, so that its process
    group is what the demo started outside its agents' sessions."""
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "manage.py", "demo_run", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def demo_answer_in_docs() -> list[str]:
    """The lines of docs/answer.md's sample of the end of ``make demo``: the code block
    after "the end of `make demo`"."""
    text = DOCS_ANSWER.read_text()
    after = text[text.index("the end of `make demo`") :]
    block = re.search(r"```\n(.*?)\n```", after, re.S)
    assert block, "docs/answer.md has no sample of the demo's answer"
    return block.group(1).splitlines()
