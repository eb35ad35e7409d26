"""The Benchsite load generator: accurate streaming load tests of OpenAI-compatible servers.

Measures TTFT, ITL, TPOT and E2EL with ``vllm bench serve``'s semantics over a hand-written
HTTP/1.1 + SSE client (see ``docs/loadgen.md``). Use ``run_bench`` for a stream of progress
events, ``run_levels`` for the finished levels alone, and ``event_loop_runner`` to run either on
uvloop when it is installed. ``config_from_workload`` runs the site's ``Workload``.
"""

from __future__ import annotations

import asyncio

from agents.loadgen.agentic_prompts import AgenticPrompts
from agents.loadgen.config import BenchConfig
from agents.loadgen.driver import ServerUnreachable, run_bench, run_levels
from agents.loadgen.events import (
    BenchFinished,
    CapacityFound,
    Event,
    LevelFinished,
    LevelStarted,
    RequestDone,
    ServerSample,
    level_label,
)
from agents.loadgen.prompts import (
    DatasetError,
    PrefixPrompts,
    RandomPrompts,
    ShareGptPrompts,
    TracePrompts,
)
from agents.loadgen.records import RequestRecord
from agents.loadgen.session_prompts import SessionPrompts
from agents.loadgen.tokenizer import TokenizerError, load_tokenizer
from agents.loadgen.workload import config_from_workload

__all__ = [
    "AgenticPrompts",
    "BenchConfig",
    "BenchFinished",
    "CapacityFound",
    "DatasetError",
    "Event",
    "LevelFinished",
    "LevelStarted",
    "PrefixPrompts",
    "RandomPrompts",
    "RequestDone",
    "RequestRecord",
    "ServerSample",
    "ServerUnreachable",
    "SessionPrompts",
    "ShareGptPrompts",
    "TokenizerError",
    "TracePrompts",
    "config_from_workload",
    "event_loop_runner",
    "level_label",
    "load_tokenizer",
    "run_bench",
    "run_levels",
]


def event_loop_runner() -> asyncio.Runner:
    """An ``asyncio.Runner`` on uvloop when it is installed, else the default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)
