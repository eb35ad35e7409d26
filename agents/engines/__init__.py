"""Engines: what the agent starts for one trial (see docs/engines.md).

``vllm_engine`` runs real ``vllm serve``; ``sim_engine`` runs the vLLM simulator
(``agents.engines.sim``). Both return a ``ProcessEngine``: ``start()`` blocks until the
server answered a probe and returns a ``StartReport`` of the phases seen, or raises
``EngineFailed`` with a ``FailureKind`` and the log lines that show it; ``stop()`` frees the
port; a ``Watchdog`` restarts a crashed engine once and reports an ``Incident``.
"""

from agents.engines.base import (
    PHASES,
    Engine,
    EngineFailed,
    FailureKind,
    Incident,
    Phase,
    StartReport,
)
from agents.engines.process import ProcessEngine, Watchdog
from agents.engines.sim.engine import sim_engine
from agents.engines.vllm import vllm_engine

__all__ = [
    "PHASES",
    "Engine",
    "EngineFailed",
    "FailureKind",
    "Incident",
    "Phase",
    "ProcessEngine",
    "StartReport",
    "Watchdog",
    "sim_engine",
    "vllm_engine",
]
