"""What every engine reports: start-up phases, failures with their class, crash incidents.

Guarantees:

- A ``Phase`` is only ever recorded when it was observed (a log line matched or a probe
  answered); a phase that was not seen is absent from ``StartReport.phases`` and listed in
  ``StartReport.unknown``, never estimated.
- Times are seconds since the engine process was started, on the agent's monotonic clock
  (when the log line was *received*, not the second-resolution stamp vLLM prints).
- An ``EngineFailed`` carries one ``FailureKind`` and the log lines that show it, so the site
  can store the class and show the evidence without reading the whole log.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# The phases in the order vLLM goes through them; a report lists those it saw.
PHASES = (
    "process_start",
    "weights_loaded",
    "kv_cache_sized",
    "graphs_captured",
    "engine_initialized",
    "server_listening",
    "health_ready",
    "first_token",
)


class FailureKind(enum.StrEnum):
    """Why an engine did not start or stopped serving, in the protocol's words: each value is
    a trial failure class (``agents.protocol.TRIAL_FAILURE_CLASSES``), sent as it is."""

    OOM_AT_STARTUP = "oom_at_startup"
    KV_CACHE_TOO_SMALL = "kv_cache_too_small"  # max_model_len beyond what the KV cache holds
    UNSUPPORTED_FLAG = "unsupported_flag"  # unknown or unsupported flag or value
    MODEL_NOT_FOUND = "model_not_found"
    STARTUP_TIMEOUT = "startup_timeout"
    CRASH = "crash"  # exited on its own: at start-up without a known cause, or mid-run
    HANG = "hang"  # alive, but sent nothing for too long while requests waited
    # An existing endpoint (agents.engines.endpoint) that refused the key, or cannot be
    # reached: the protocol has no class of its own for that, the message says which.
    MODEL_ACCESS_DENIED = "model_access_denied"
    ENDPOINT_UNREACHABLE = "other"


@dataclass(frozen=True)
class Phase:
    """One observed start-up phase: when (s since process start) and what the log said."""

    name: str
    at: float
    detail: dict[str, float | int | str] = field(default_factory=dict)


@dataclass(frozen=True)
class StartReport:
    """A successful start: the exact argv, the phases seen, and whether it is simulated."""

    engine: str
    argv: list[str]
    base_url: str
    phases: list[Phase]
    simulated: bool
    version: str | None = None

    @property
    def unknown(self) -> list[str]:
        seen = {phase.name for phase in self.phases}
        return [name for name in PHASES if name not in seen]

    def phase(self, name: str) -> Phase | None:
        return next((phase for phase in self.phases if phase.name == name), None)

    def as_dict(self) -> dict:
        return {
            "engine": self.engine,
            "argv": list(self.argv),
            "base_url": self.base_url,
            "simulated": self.simulated,
            "version": self.version,
            "phases": [{"name": p.name, "at": round(p.at, 3), **p.detail} for p in self.phases],
            "unknown_phases": self.unknown,
        }


class EngineFailed(RuntimeError):
    """The engine did not start, or died; ``kind`` says why and ``evidence`` shows it."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        evidence: list[str] | None = None,
        exit_code: int | None = None,
        signal: int | None = None,
        log_tail: list[str] | None = None,
    ):
        self.kind = kind
        self.message = message
        self.evidence = list(evidence or [])
        self.exit_code = exit_code
        self.signal = signal
        self.log_tail = list(log_tail or [])
        super().__init__(f"{kind.value}: {message}")

    def as_dict(self) -> dict:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "evidence": self.evidence,
            "exit_code": self.exit_code,
            "signal": self.signal,
        }


@dataclass(frozen=True)
class Incident:
    """The engine died while serving; whether the watchdog brought the same config back."""

    failure: EngineFailed
    at: float  # monotonic time the exit was seen
    restarted: bool
    restart: StartReport | None
    lost: str


PhaseCallback = Callable[[Phase], None]


class Engine(Protocol):
    """What the agent starts for one trial. ``start`` blocks until the server answers a
    probe request (or raises ``EngineFailed``); ``stop`` is idempotent and frees the port."""

    name: str

    @property
    def base_url(self) -> str: ...

    def start(self, on_phase: PhaseCallback | None = None) -> StartReport: ...

    def stop(self) -> None: ...

    def exit_status(self) -> EngineFailed | None:
        """``None`` while running (or never started); the failure once it died unasked."""
        ...
