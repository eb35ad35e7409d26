"""``make demo``'s main job, as a user runs it: embedded defaults (SQLite, no Redis, no
broker), the site served by Daphne, the demo experiment through run_start, the provisioning
task, the local agent and the simulator, and the final table. About two minutes."""

from __future__ import annotations

import os
import subprocess
import sys

from .live_server import ROOT, free_port


def test_the_demo_runs_the_demo_experiment_end_to_end(tmp_path):
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "BENCHSITE_LOCAL_PODS_DIR"}
    }
    env |= {
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "MEDIA_ROOT": str(tmp_path / "media"),
        "COLUMNS": "100",
    }
    manage = [sys.executable, "manage.py"]
    migrate = subprocess.run(
        [*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, capture_output=True
    )
    assert migrate.returncode == 0, migrate.stderr.decode()
    port = free_port()
    demo = subprocess.run(
        [*manage, "demo_run", "--exit", "--port", str(port)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = demo.stdout
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Run succeeded" in out
    assert "SIMULATED" in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    # 3 values of max_num_batched_tokens × 4 concurrency levels, each measured.
    assert len(rows) == 12, out[-3000:]
    assert all("$" in row for row in rows)  # a cost per 1M output tokens on every row
    assert "Winner under the SLOs" in out or "No configuration met the SLOs" in out
    assert "Password:" in out
    # Every address printed is where the demo serves, not a default port.
    assert f"Sign in:  http://127.0.0.1:{port}/login/" in out
    assert "127.0.0.1:8000" not in out
    assert f"Run page:   http://127.0.0.1:{port}/o/demo/runs/" in out
