"""Does the estimate say how long a run takes? The demo run end to end, its estimate beside it.

    .venv/bin/python -m benchmarks.estimate_accuracy [--engine sim|vllm] [--runs 1]

Each run is ``manage.py demo_run --exit`` on a fresh SQLite database in a temporary folder
(the site, the provisioning task, the local agent and the simulator or real vLLM, as
``make demo`` runs them); the run's estimate is the one frozen into it when it started
(``Run.experiment_snapshot["estimate_seconds"]``, ``runs.selectors.estimates``), its duration
from its start (``created_at``) to its end (``finished_at``). It prints both and their
ratio; issue 31 asks for the estimate within ±25 % of what the run takes, for the simulated
demo and the ``--engine vllm`` one. ``--engine vllm`` needs ``BENCHSITE_VLLM_VENV`` (``make
demo ENGINE=vllm`` builds it).

Simulated runs are computed on this machine, so their duration is this machine's: the
estimate's ``Assumptions.sim_*`` were measured here with this script (a 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def demo_env(folder: Path) -> dict[str, str]:
    """The environment of a demo on its own SQLite database and media under ``folder``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DATABASE_URL", "REDIS_URL", "MEDIA_ROOT")
    }
    return env | {
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{folder / 'demo.sqlite3'}",
        "MEDIA_ROOT": str(folder / "media"),
        "COLUMNS": "120",
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def demo_run(engine: str, folder: Path) -> dict:
    """One ``demo_run --exit`` in ``folder`` (a database there already keeps its earlier
    runs): the new run's estimate and its duration."""
    env = demo_env(folder)
    python = sys.executable
    manage = [python, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    started = time.monotonic()
    with (folder / "demo.log").open("w") as log:
        subprocess.run(
            [*manage, "demo_run", "--exit", "--port", str(_free_port()), "--engine", engine],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=3600,
        )
    wall = time.monotonic() - started
    with sqlite3.connect(folder / "demo.sqlite3") as db:
        ((state, created, finished, snapshot),) = db.execute(
            "SELECT state, created_at, finished_at, experiment_snapshot FROM runs_run "
            "ORDER BY created_at DESC LIMIT 1"
        ).fetchall()
    took = (datetime.fromisoformat(finished) - datetime.fromisoformat(created)).total_seconds()
    estimate = float(json.loads(snapshot)["estimate_seconds"])
    return {"state": state, "estimate_s": estimate, "run_s": took, "demo_wall_s": wall}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["sim", "vllm"], default="sim")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    for index in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="benchsite-estimate-") as folder:
            found = demo_run(args.engine, Path(folder))
        ratio = found["estimate_s"] / found["run_s"]
        print(
            f"{args.engine} demo run {index + 1}: {found['state']}, took {found['run_s']:.1f} s "
            f"(the whole demo {found['demo_wall_s']:.0f} s); estimated {found['estimate_s']:.1f} s"
            f" = {ratio:.2f} x what it took ({(ratio - 1) * 100:+.0f} %)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
