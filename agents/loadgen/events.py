"""What a running benchmark reports: the events ``run_bench`` streams, in this order per
level: ``LevelStarted``, then ``RequestDone`` and ``ServerSample`` as they happen,
``LevelFinished``; after a capacity search ``CapacityFound``; ``BenchFinished`` last.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.loadgen.records import RequestRecord
from agents.protocol import LevelResult


@dataclass(frozen=True)
class LevelStarted:
    """A level's clock has started (prompts built, connections open)."""

    index: int
    level: dict
    total: int | None  # requests to send, or None in duration mode
    duration: float | None


@dataclass(frozen=True)
class RequestDone:
    """Running totals of the current level after one more request ended, and that request."""

    index: int
    completed: int
    failed: int
    output_tokens: int
    elapsed: float
    record: RequestRecord = field(repr=False)


@dataclass(frozen=True)
class ServerSample:
    """One periodic scrape of the server's metrics during a level (``None``: not exposed)."""

    index: int
    kv_cache_usage: float | None
    num_requests_running: float | None
    num_requests_waiting: float | None


@dataclass(frozen=True)
class LevelFinished:
    """A level's result, its per-request records, the server's metrics over it
    (``agents.loadgen.server_metrics``; None: not scraped) and, when they were sampled, each
    GPU's figures (``agents.protocol.GpuLevelFigures`` as JSON; ``agents.telemetry``)."""

    index: int
    result: LevelResult
    records: list[RequestRecord] = field(repr=False)
    server: dict | None = None
    gpus: list[dict] | None = None

    def as_json(self) -> dict:
        """The result as one JSON object, with the server's metrics and the GPUs in it."""
        gpus = {} if self.gpus is None else {"gpus": self.gpus}
        return self.result.model_dump(mode="json") | {"server": self.server} | gpus


@dataclass(frozen=True)
class CapacityFound:
    """The capacity search ended: ``result`` is ``agents.protocol.CapacityResult`` JSON."""

    result: dict


@dataclass(frozen=True)
class BenchFinished:
    """Every level ran, or ``stopped`` early; ``config`` is ``BenchConfig.describe()``;
    ``capacity`` what the capacity search found, when there was one."""

    config: dict
    levels: list[LevelResult]
    stopped: bool = False
    capacity: dict | None = None


Event = LevelStarted | RequestDone | ServerSample | LevelFinished | CapacityFound | BenchFinished


def level_label(level: dict) -> str:
    """``concurrency 8`` or ``rate 2.5 req/s``: how a level is named to people."""
    if "concurrency" in level:
        return f"concurrency {level['concurrency']}"
    return f"rate {level['request_rate']} req/s"
