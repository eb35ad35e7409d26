"""The local provider: the agent as a subprocess on the worker's machine, for the demo,
on-premises GPU boxes and tests.

Guarantees (on top of ``runs.providers.base``):
- A "pod" is one ``benchsite-agent run`` process in its own process group, with a record in
  ``state_dir`` (``<pod name>.json``): ``find_by_name`` and ``list_bench_pods`` read those
  records, so a restarted worker finds the pods an earlier one started.
- The job and the run token reach the agent only through its environment; its output goes to
  ``<state_dir>/<pod name>/agent.log``.
- The agent's environment is the pod's own (``PodSpec.env``), the operator's ``extra_env``,
  and from the worker's environment only the names in ``AGENT_ENV_ALLOWLIST``: never the
  site's secrets, which live in that same environment.
- A record whose process is gone reads ``EXITED``; a recycled pid is not mistaken for the
  agent (the process's start time is recorded and compared).
- No zombie: the process that started an agent reads its exit status as soon as it exits,
  whichever process stops it and whether or not it calls the provider again.
- ``terminate`` stops the agent and every process below it, engines in their own sessions
  included, and removes the record; it is idempotent. It asks first (SIGTERM: the agent
  stops its engine, reports and delivers what it holds) and waits ``STOP_GRACE_SECONDS``; an
  agent still up then is left to deliver until ``delivery_grace`` seconds after the ask
  (the site's ``BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS``), and the next ``terminate`` after
  that (reconcile's orphan sweep calls it every pass) kills what is left (SIGKILL).
- Costs nothing to rent: ``cost_per_hr`` and ``price`` are None, so runs are priced from the
  catalogue (the GPU the experiment names — for the simulator, the simulated GPU).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path

from agents.protocol import AGENT_HOST_SETTINGS
from runs.providers.base import (
    POD_NAME_PREFIX,
    PermanentProviderError,
    PodInfo,
    PodSpec,
    PodState,
)
from runs.providers.process_tree import kill_tree

STOP_GRACE_SECONDS = 10.0
# The worker's variables an agent inherits (docs/security.md, "The agent's environment"):
# what a Python process and the libraries the agent runs need on this host, and the agent's
# own host settings. The worker's environment also holds the site's secrets (SECRET_KEY signs
# run tokens, CREDENTIALS_ENCRYPTION_KEY opens every organization's keys, DATABASE_URL), so
# nothing is passed that is not named here.
AGENT_ENV_ALLOWLIST = frozenset(
    {
        # The process: where programs, the home folder, the locale, the time zone, scratch.
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "LC_ALL",
        "LC_CTYPE",
        "LC_NUMERIC",
        "LC_TIME",
        "LC_COLLATE",
        "LC_MONETARY",
        "LC_MESSAGES",
        "TZ",
        "TMPDIR",
        # Python: which interpreter and packages (the agent is ``python -m agents.cli``).
        "PYTHONPATH",
        "PYTHONHOME",
        "VIRTUAL_ENV",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        # GPUs on an on-premises box: the driver's libraries and which devices are this one's.
        "LD_LIBRARY_PATH",
        "CUDA_VISIBLE_DEVICES",
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        # The way out to the site and the hub: proxies and trusted certificates.
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        # The Hugging Face libraries' cache and offline switches (never a token: HF_TOKEN is
        # the organization's, and comes with the pod).
        "HF_HOME",
        "TRANSFORMERS_OFFLINE",
        "HF_HUB_DISABLE_TELEMETRY",
        *AGENT_HOST_SETTINGS,
    }
)
# Processes this worker started and that still run: their exit is read from the child itself.
_children: dict[int, subprocess.Popen] = {}
_children_lock = threading.Lock()


def _reap(process: subprocess.Popen) -> None:
    """Waits for the agent ``process`` to exit and forgets it: its exit status is read at once,
    so it never lingers as a zombie. A thread per agent because the process that started an
    agent is seldom the one that stops it (a Celery pool process provisions, another one
    finalizes, and the first may never hear of that pod again); it waits on its own child's
    pid only, never on any child (``waitpid(-1)`` or a SIGCHLD handler would take the exit
    status of other ``subprocess`` users of the process)."""
    process.wait()
    with _children_lock:
        if _children.get(process.pid) is process:
            del _children[process.pid]


def agent_environment(worker_environment: Mapping[str, str]) -> dict[str, str]:
    """The part of ``worker_environment`` an agent may see: the names in
    ``AGENT_ENV_ALLOWLIST``."""
    return {key: value for key, value in worker_environment.items() if key in AGENT_ENV_ALLOWLIST}


def default_agent_command() -> list[str]:
    """The agent of this very installation."""
    return [sys.executable, "-m", "agents.cli", "run"]


def _process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (Linux), or None when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[19] if len(fields) > 19 else None


def _alive(pid: int, started: str | None) -> bool:
    with _children_lock:
        child = _children.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now_started = _process_start_time(pid)
    if started is not None and now_started is not None and now_started != started:
        return False  # the pid was recycled
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError, IndexError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


class LocalProvider:
    """Pods as local processes (see the module docstring)."""

    name = "local"

    def __init__(
        self,
        state_dir: Path,
        *,
        agent_command: Sequence[str] | None = None,
        extra_env: dict[str, str] | None = None,
        delivery_grace: float = 0.0,
    ):
        self.state_dir = Path(state_dir)
        self.agent_command = list(agent_command or default_agent_command())
        self.extra_env = dict(extra_env or {})
        self.delivery_grace = delivery_grace

    # -- records ---------------------------------------------------------------------------

    def _record_path(self, name: str) -> Path:
        if not name.startswith(POD_NAME_PREFIX) or "/" in name or name in (".", ".."):
            raise PermanentProviderError(f"not a pod name: {name!r}")
        return self.state_dir / f"{name}.json"

    def _read(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def _info(self, record: dict) -> PodInfo:
        alive = _alive(record["pid"], record.get("started"))
        return PodInfo(
            pod_id=record["name"],
            name=record["name"],
            state=PodState.RUNNING if alive else PodState.EXITED,
            cost_per_hr=None,
            gpu_type_id=record.get("gpu_type_id"),
            gpu_count=record.get("gpu_count"),
            created_at=record.get("created_at"),
            raw_status="running" if alive else "exited",
        )

    # -- the Provider interface ------------------------------------------------------------

    def find_by_name(self, name: str) -> PodInfo | None:
        record = self._read(self._record_path(name))
        return self._info(record) if record else None

    def create(self, spec: PodSpec) -> PodInfo:
        path = self._record_path(spec.name)
        if path.exists():
            raise PermanentProviderError(f"a pod named {spec.name} exists already")
        workdir = self.state_dir / spec.name
        workdir.mkdir(parents=True, exist_ok=True)
        env = {**agent_environment(os.environ), **self.extra_env, **spec.env}
        log = (workdir / "agent.log").open("ab")
        try:
            process = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                [*self.agent_command, "--workdir", str(workdir / "run")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=workdir,
                start_new_session=True,
            )
        except OSError as exc:
            raise PermanentProviderError(f"could not start the agent: {exc.strerror}") from None
        finally:
            log.close()
        with _children_lock:
            _children[process.pid] = process
        threading.Thread(target=_reap, args=(process,), daemon=True).start()
        record = {
            "name": spec.name,
            "pid": process.pid,
            "started": _process_start_time(process.pid),
            "created_at": time.time(),
            "gpu_type_id": spec.gpu_type_id,
            "gpu_count": spec.gpu_count,
        }
        self._write(path, record)
        return self._info(record)

    def _write(self, path: Path, record: dict) -> None:
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(record))
        temporary.replace(path)

    def status(self, pod_id: str) -> PodInfo | None:
        return self.find_by_name(pod_id)

    def terminate(self, pod_id: str) -> None:
        path = self._record_path(pod_id)
        record = self._read(path)
        if record is None:
            return
        pid = record["pid"]
        alive = _alive(pid, record.get("started"))
        asked = record.get("stop_asked_at")
        if alive and asked is None:
            # The agent stops its engine on SIGTERM; whatever is left later (an engine in its
            # own session) is killed with it, so what is below it now is kept.
            below = kill_tree(pid, signal.SIGTERM)
            asked = time.time()
            record = {**record, "stop_asked_at": asked, "below": below}
            self._write(path, record)
            deadline = time.monotonic() + STOP_GRACE_SECONDS
            while _alive(pid, record.get("started")) and time.monotonic() < deadline:
                time.sleep(0.05)
            alive = _alive(pid, record.get("started"))
        if alive and time.time() - asked < self.delivery_grace:
            return  # it has stopped running and delivers what it holds: ask again later
        if asked is not None:
            below = [tuple(process) for process in record.get("below", [])]
            kill_tree(pid, signal.SIGKILL, below=below, include_root=alive)
        with _children_lock:
            child = _children.pop(pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(5)
        path.unlink(missing_ok=True)

    def list_bench_pods(self) -> list[PodInfo]:
        if not self.state_dir.exists():
            return []
        records = (self._read(path) for path in sorted(self.state_dir.glob("bench-*.json")))
        return [self._info(record) for record in records if record]

    def price(self, gpu_type_id: str, cloud_type: str) -> Decimal | None:
        return None
