"""Real servers for tests and benchmarks, each in its own process on the current (test)
database: Daphne serving the project's application on the channel layer, and a Celery worker
taking tasks from the broker."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The test database's address, for processes that must share it."""
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
    timeout: float = 60,
    log_path: str | None = None,
    port: int | None = None,
    env: dict[str, str] | None = None,
) -> Iterator[str]:
    """Yields "127.0.0.1:PORT" once the server accepts connections; stops it afterwards.
    The server's output goes to ``log_path`` when given; ``port`` defaults to a free one;
    ``env`` adds to the server's environment."""
    port = port or free_port()
    env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "true", **(env or {})}
    log_path = log_path or os.environ.get("BENCHSITE_LIVE_LOG")
    # Readable too: a server that does not start is reported with the end of its log.
    log = tempfile.TemporaryFile() if not log_path else open(log_path, "a+b")  # noqa: SIM115
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


@contextlib.contextmanager
def _celery_process(
    args: list[str], log_path: Path, *, env: dict[str, str] | None, ready: bytes, timeout: float
) -> Iterator[subprocess.Popen]:
    """``celery ARGS`` on the test database in its own process group, yielded once its log
    shows ``ready``; stopped on the way out whatever happened (SIGTERM, then SIGKILL)."""
    env = {**os.environ, "DATABASE_URL": database_url(), "DEBUG": "true", **(env or {})}
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", *args],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout
        while ready not in log_path.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"celery {args[2]} did not start: {log_path.read_text()[-3000:]}"
                )
            time.sleep(0.1)
        yield process
    finally:
        stop_process_group(process)


def celery_worker(
    log_path: Path,
    *,
    app: str = "benchsite",
    env: dict[str, str] | None = None,
    timeout: float = 90,
) -> contextlib.AbstractContextManager[subprocess.Popen]:
    """A real ``celery worker`` of ``app`` (prefork, one child) on the test database, taking
    tasks from the queue ``CELERY_TASK_DEFAULT_QUEUE`` names in the environment and from its
    notifications queue (``benchsite.queues``); yields its process once it consumes. The
    worker and its child are one process group, stopped on the way out whatever happened
    (SIGTERM, then SIGKILL); a test may SIGKILL it sooner."""
    hostname = f"test-{uuid.uuid4().hex[:12]}@%h"
    args = [
        *("-A", app, "worker"),
        *("--hostname", hostname, "--concurrency", "1", "--loglevel", "INFO"),
        # Alone on a shared Redis: no syncing or chatter with other tests' workers.
        *("--without-mingle", "--without-gossip", "--without-heartbeat"),
    ]
    return _celery_process(args, log_path, env=env, ready=b" ready.", timeout=timeout)


def celery_beat(
    log_path: Path, *, env: dict[str, str] | None = None, timeout: float = 60
) -> contextlib.AbstractContextManager[subprocess.Popen]:
    """A real ``celery beat`` of the site on the test database, with the scheduler the
    settings name (django-celery-beat's, reading its schedule from the database); yields its
    process once it has started, and stops it on the way out."""
    # Its local state file goes beside its log, not into the checkout.
    args = ["-A", "benchsite", "beat", "--loglevel", "DEBUG",
            "--schedule", str(log_path.with_suffix(".schedule"))]  # fmt: skip  # flag, value
    return _celery_process(args, log_path, env=env, ready=b"beat: Starting...", timeout=timeout)


def stop_process_group(process: subprocess.Popen, grace: float = 20) -> None:
    """SIGTERM to the process's group (a worker finishes its task), SIGKILL after ``grace``."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        if process.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait)
    # The pool's children are gone with their parent's group, or reaped by init.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


def unacked_messages(channel, queue: str) -> dict[str, dict]:
    """Messages of ``queue`` that a worker took and never acknowledged (Redis puts them back
    after the visibility timeout), by delivery tag; ``channel`` is a kombu Redis channel."""
    found = {}
    for tag, raw in channel.client.hgetall(channel.unacked_key).items():
        payload, _exchange, routing_key = json.loads(raw)
        if routing_key == queue:
            found[tag.decode() if isinstance(tag, bytes) else tag] = payload
    return found


def broker_queue_delete(queue: str) -> None:
    """Removes the default queue ``queue`` and its notifications queue from the shared broker:
    their waiting messages, their bindings, and their unacknowledged ones (which Redis would
    otherwise put back one day, for nobody)."""
    from kombu import Exchange, Queue

    from benchsite.celery import app
    from benchsite.queues import notifications_queue

    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for name in (queue, notifications_queue(queue)):
            for tag in unacked_messages(channel, name):
                channel.client.pipeline().zrem(channel.unacked_index_key, tag).hdel(
                    channel.unacked_key, tag
                ).execute()
            # A channel deletes only the bindings it knows, so declare the queue first: a
            # bare queue_delete leaves the messages and the binding behind.
            bound = Queue(name, Exchange(name), routing_key=name, channel=channel)
            bound.declare()
            bound.delete()


def channel_layer_delete(prefix: str) -> None:
    """Removes every key of the channel layer under ``prefix`` from the shared Redis: the
    groups and undelivered messages of the servers that used it. Only for a test's own prefix
    (one that no other prefix starts with)."""
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()
