"""An engine that is a server process: start it, read its log, probe it, stop it, watch it.

Both engines run this way: real vLLM (``vllm serve …``) and the simulator (``python -m
agents.engines.sim …``, which prints vLLM-worded log lines), so one lifecycle is tested.

Guarantees:

- The process runs in its own session and process group with exactly the environment built
  by the caller (nothing else from the agent's environment leaks in) and an argv list: no
  shell anywhere.
- Its output goes line by line to ``log_path`` (each line prefixed with seconds since start)
  and into a bounded tail kept in memory for reports; phases are recorded as lines arrive.
- ``start`` returns only after ``/health`` answered 200 and a one-token streamed probe
  request produced its first token; otherwise it stops the whole group and raises
  ``EngineFailed`` with a class and the log lines that show it.
- ``stop`` sends SIGTERM to the group, SIGKILL after ``stop_grace`` seconds, reaps the
  process and waits until the port accepts a new listener, so the next config can start at
  once. It is idempotent and safe from any thread.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from agents.engines.base import (
    EngineFailed,
    FailureKind,
    Incident,
    Phase,
    PhaseCallback,
    StartReport,
)
from agents.engines.vllm_log import LogPhases, classify_failure

# Variables passed through from the agent's own environment: what a process needs to run
# and to find its GPUs. Everything else (tokens, keys) must be given explicitly.
PASSTHROUGH_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "USER",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


class ProcessEngine:
    """One server process for one serve configuration. Not reusable across configs: make a
    new one per trial (``restart`` brings the same config back)."""

    accepts_ignore_eos = True  # vLLM's extension; the simulator takes it too

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        host: str,
        port: int,
        model: str,
        workdir: Path,
        startup_timeout: float = 900.0,
        stop_grace: float = 20.0,
        simulated: bool = False,
        tail_lines: int = 400,
        probe: bool = True,
        scratch_dirs: Sequence[Path] = (),
    ):
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.host = host
        self.port = port
        self.model = model
        self.workdir = Path(workdir)
        self.log_path = self.workdir / f"{name}.log"
        self.startup_timeout = startup_timeout
        self.stop_grace = stop_grace
        self.simulated = simulated
        self.probe = probe
        # Folders the process needs only while it runs (sockets, temp files): created at each
        # start, removed at stop.
        self.scratch_dirs = [Path(path) for path in scratch_dirs]
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self._lines: list[str] = []  # the whole start-up log, kept for classification
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._started_at = 0.0
        self._phases: list[Phase] = []
        self._parser = LogPhases()
        self._on_phase: PhaseCallback | None = None
        self._stopping = False
        self._serving = False

    # -- public -------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self, on_phase: PhaseCallback | None = None) -> StartReport:
        """Starts the process and waits until it serves; raises ``EngineFailed``."""
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError("already running; stop() first")
        self.workdir.mkdir(parents=True, exist_ok=True)
        for path in self.scratch_dirs:
            path.mkdir(parents=True, exist_ok=True)
        self._on_phase = on_phase
        self._phases = []
        self._parser = LogPhases()
        self._lines = []
        self._stopping = False
        self._serving = False
        log = self.log_path.open("ab")
        self._started_at = time.monotonic()
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.workdir,
                # A process group of its own, so that a stop reaches every process it starts,
                # but the agent's session: with the kernel's autogroup scheduling a session is
                # a scheduling group, and an engine in a session of its own that keeps every
                # core busy starved the load generator of CPU for 0.1-1.4 s at a time (its
                # reads then took whole responses at once; docs/loadgen.md, "Trust on real
                # vLLM").
                process_group=0,
            )
        except OSError as exc:
            log.close()
            for path in self.scratch_dirs:
                shutil.rmtree(path, ignore_errors=True)
            raise EngineFailed(
                FailureKind.CRASH, f"could not execute {self.argv[0]!r}: {exc}"
            ) from exc
        self._record("process_start", {"pid": self._proc.pid})
        self._reader = threading.Thread(
            target=self._read_output, args=(self._proc, log), daemon=True, name="engine-log"
        )
        self._reader.start()
        try:
            self._wait_ready()
        except EngineFailed:
            self.stop()
            raise
        self._serving = True
        return StartReport(
            engine=self.name,
            argv=list(self.argv),
            base_url=self.base_url,
            phases=list(self._phases),
            simulated=self.simulated,
            version=self._parser.version,
        )

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after the grace period; waits for the port."""
        self._stopping = True
        self._serving = False
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(self.stop_grace)
        # Children may outlive the leader (vLLM's engine core): kill what is left of the group.
        self._signal_group(proc, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        for path in self.scratch_dirs:
            shutil.rmtree(path, ignore_errors=True)
        deadline = time.monotonic() + 10
        while not port_is_free(self.host, self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL to the whole group at once (a hung engine may never act on a SIGTERM);
        ``stop`` still reaps it and frees its port."""
        self._stopping = True
        self._serving = False
        if self._proc is not None:
            self._signal_group(self._proc, signal.SIGKILL)

    def exit_status(self) -> EngineFailed | None:
        """The failure if the process died while it was meant to be serving."""
        proc = self._proc
        if proc is None or self._stopping:
            return None
        code = proc.poll()
        if code is None:
            return None
        return self._failure_from_exit(code, default=FailureKind.CRASH)

    @property
    def phases(self) -> list[Phase]:
        return list(self._phases)

    # -- internals ----------------------------------------------------------------------

    @staticmethod
    def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def _record(self, name: str, detail: dict) -> None:
        # The same dict the log parser holds: a later line may add facts to this phase.
        phase = Phase(name, time.monotonic() - self._started_at, detail)
        with self._lock:
            self._phases.append(phase)
        if self._on_phase is not None:
            self._on_phase(phase)

    def _read_output(self, proc: subprocess.Popen[bytes], log) -> None:
        assert proc.stdout is not None
        with log:
            for raw in iter(proc.stdout.readline, b""):
                at = time.monotonic() - self._started_at
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                log.write(f"[{at:9.3f}] {line}\n".encode())
                log.flush()
                with self._lock:
                    self.tail.append(line)
                    if not self._serving and len(self._lines) < 20_000:
                        self._lines.append(line)
                if not self._serving:
                    seen = self._parser.feed(line)
                    if seen is not None:
                        self._record(*seen)

    def _failure_from_exit(self, code: int, *, default: FailureKind) -> EngineFailed:
        if self._proc is not None:
            # The leader is gone: what is left of its group (vLLM's engine core) is an orphan
            # holding the accelerator and the log pipe open. Killed, the pipe ends at once.
            self._signal_group(self._proc, signal.SIGKILL)
        if self._reader is not None:
            self._reader.join(5)  # the last lines carry the reason
        with self._lock:
            lines = list(self._lines) if not self._serving else list(self.tail)
            tail = list(self.tail)[-60:]
        kind, message, evidence = classify_failure(lines, default=default)
        sig = -code if code < 0 else None
        how = f"killed by signal {sig}" if sig else f"exit code {code}"
        return EngineFailed(
            kind,
            f"{message} ({how})",
            evidence=evidence,
            exit_code=None if sig else code,
            signal=sig,
            log_tail=tail,
        )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = self._started_at + self.startup_timeout
        while True:
            code = self._proc.poll()
            if code is not None:
                raise self._failure_from_exit(code, default=FailureKind.CRASH)
            if time.monotonic() > deadline:
                with self._lock:
                    lines = list(self._lines)
                    tail = list(self.tail)[-60:]
                # A timeout whose log already shows a known cause is reported as that cause.
                kind, message, evidence = classify_failure(
                    lines, default=FailureKind.STARTUP_TIMEOUT
                )
                if kind is FailureKind.STARTUP_TIMEOUT:
                    message = f"not ready within {self.startup_timeout:g} s"
                raise EngineFailed(kind, message, evidence=evidence, log_tail=tail)
            if self._get("/health", timeout=2.0) == 200:
                self._record("health_ready", {})
                break
            time.sleep(0.1)
        if self.probe:
            detail = self._probe_first_token(deadline)
            self._record("first_token", detail)

    def _get(self, path: str, *, timeout: float) -> int | None:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            return response.status
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def _probe_first_token(self, deadline: float) -> dict:
        """One streamed completion of one token; returns its TTFT as detail."""
        body = json.dumps(
            {
                "model": self.model,
                "prompt": "hello",
                "max_tokens": 1,
                "stream": True,
                "ignore_eos": True,
            }
        )
        timeout = max(5.0, deadline - time.monotonic())
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        sent = time.monotonic()
        try:
            conn.request(
                "POST", "/v1/completions", body, headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            if response.status != 200:
                text = response.read(2000).decode("utf-8", "replace")
                raise EngineFailed(
                    FailureKind.CRASH,
                    f"the probe request was refused: HTTP {response.status}",
                    evidence=[text],
                )
            while True:
                line = response.readline()
                if not line:
                    break
                if line.startswith(b"data:") and b'"choices"' in line:
                    return {"probe_ttft_ms": round((time.monotonic() - sent) * 1000, 3)}
        except (OSError, http.client.HTTPException) as exc:
            raise EngineFailed(FailureKind.CRASH, f"the probe request failed: {exc}") from exc
        finally:
            conn.close()
        raise EngineFailed(FailureKind.CRASH, "the probe request produced no token")


class Watchdog:
    """Watches a started engine; on an unexpected exit restarts the same config once.

    ``on_incident`` is called (from the watchdog's thread) with an ``Incident`` saying what
    failed, whether the engine is serving again, and what was lost: the requests in flight at
    the crash fail, and the load level running then must be repeated or reported partial.
    """

    def __init__(
        self,
        engine: ProcessEngine,
        *,
        restarts: int = 1,
        period: float = 0.2,
        on_incident: Callable[[Incident], None] | None = None,
    ):
        self.engine = engine
        self.restarts_left = restarts
        self.period = period
        self.on_incident = on_incident
        self.incidents: list[Incident] = []
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self.healed = threading.Event()

    def __enter__(self) -> Watchdog:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="engine-watchdog")
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(self.engine.startup_timeout + 30)

    def _run(self) -> None:
        while not self._halt.wait(self.period):
            failure = self.engine.exit_status()
            if failure is None:
                continue
            seen = time.monotonic()
            restart: StartReport | None = None
            restarted = False
            if self.restarts_left > 0 and not self._halt.is_set():
                self.restarts_left -= 1
                self.engine.stop()
                try:
                    restart = self.engine.start()
                    restarted = True
                except EngineFailed as exc:
                    failure = exc
            lost = (
                "requests in flight at the crash failed; the load level running then is "
                "incomplete"
                + ("" if restarted else "; the engine is down and later levels cannot run")
            )
            incident = Incident(failure, seen, restarted, restart, lost)
            self.incidents.append(incident)
            if self.on_incident is not None:
                self.on_incident(incident)
            if restarted:
                self.healed.set()
            else:
                return
