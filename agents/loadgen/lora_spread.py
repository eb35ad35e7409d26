"""Requests spread over LoRA adapters: which served name each request asks for, and how many
of a level's requests went to each.

Guarantees: with adapters (``BenchConfig.lora_models``), request ``key`` (a prompt's index in
the level, or a session's number, so every turn of a session stays on one adapter) goes to
adapter ``key mod n``: every configuration of a run sends the same requests to the same
adapters, each adapter an equal share to within one. Without adapters every request asks for
the served model, and a level reports no spread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from agents.loadgen.config import BenchConfig
from agents.loadgen.records import RequestRecord


def request_model(config: BenchConfig, key: int) -> str:
    """The ``model`` field of request ``key`` (see the module docstring)."""
    adapters = config.lora_models
    return adapters[key % len(adapters)] if adapters else config.model


def lora_requests(config: BenchConfig, records: Iterable[RequestRecord]) -> dict[str, int] | None:
    """How many of ``records`` asked for each adapter, every adapter named (None: none)."""
    if not config.lora_models:
        return None
    counts = Counter(record.model for record in records)
    return {name: counts[name] for name in config.lora_models}
