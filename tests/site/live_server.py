"""A real ASGI server for tests and benchmarks: Daphne in a subprocess, serving the
project's application on the current (test) database and channel layer."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def _database_url() -> str:
    settings = connection.settings_dict
    if connection.vendor != "postgresql":
        raise RuntimeError("a live server needs PostgreSQL (the test database must be shared)")
    user = settings.get("USER") or ""
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = settings.get("HOST") or "127.0.0.1"
    port = settings.get("PORT") or 5432
    return f"postgres://{auth}{host}:{port}/{settings['NAME']}"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def daphne_server(
    timeout: float = 30, log_path: str | None = None, port: int | None = None
) -> Iterator[str]:
    """Yields "127.0.0.1:PORT" once the server accepts connections; stops it afterwards.
    The server's output goes to ``log_path`` when given; ``port`` defaults to a free one."""
    port = port or free_port()
    env = {**os.environ, "DATABASE_URL": _database_url(), "DEBUG": "true"}
    log_path = log_path or os.environ.get("BENCHSITE_LIVE_LOG")
    log = tempfile.TemporaryFile() if not log_path else open(log_path, "ab")  # noqa: SIM115
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "daphne",
            "-b",
            "127.0.0.1",
            "-p",
            str(port),
            "benchsite.asgi:application",
        ],
        cwd=ROOT,
        env=env,
        # A file, not a pipe: nobody reads a pipe while the server runs, and a full one
        # would block the server on its next log line.
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if process.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"Daphne did not start: {log.read().decode()[-2000:]}")
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
