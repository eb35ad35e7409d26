"""GPU telemetry over each level of a benchmark's event stream (``agents.loadgen`` events):
the one wiring the agent's runner and ``benchsite-agent bench --gpu-telemetry`` share.

Guarantees: ``observe`` starts sampling at each ``LevelStarted`` (after the level's warm-up)
and, at its ``LevelFinished``, stops and gives back the event with each GPU's figures in its
``gpus`` (``agents.protocol.GpuLevelFigures`` as JSON); every other event comes back as it
is. ``close`` stops a level that never finished (its figures are dropped, as its result is).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, TypeVar

from agents.loadgen import LevelFinished, LevelStarted
from agents.telemetry.nvml import NvmlGpus
from agents.telemetry.sampler import GpuSampler

E = TypeVar("E")


class GpuLevels:
    """Samples ``gpus`` level by level; ``on_sample`` gets every sample (live figures)."""

    def __init__(self, gpus: NvmlGpus, **sampling: Any):
        """``sampling``: ``GpuSampler``'s ``period`` and ``on_sample``, for every level."""
        self._new_sampler = functools.partial(GpuSampler, gpus, **sampling)
        self._sampler: GpuSampler | None = None

    async def observe(self, event: E) -> E:
        if isinstance(event, LevelStarted):
            await self.close()
            self._sampler = self._new_sampler()
            self._sampler.start()
        elif isinstance(event, LevelFinished) and self._sampler is not None:
            figures = await self._sampler.finish()
            self._sampler = None
            return dataclasses.replace(event, gpus=[gpu.model_dump(mode="json") for gpu in figures])
        return event

    async def close(self) -> None:
        if self._sampler is not None:
            await self._sampler.finish()
            self._sampler = None
