"""GPU readings over one load level: sampled about every ``period`` seconds from its start
to its end, each GPU's mean and maximum reported with the level's measurement.

Guarantees: sampling runs in a worker thread (NVML calls block on the driver), so the event
loop that times requests never waits on it; a sample is taken when the level starts and then
every ``period`` seconds, so even a level shorter than the period has one; ``on_sample``
gets every sample as it is taken (the live figures); a reading NVML fails is None in its
sample (``nvml``), never an error raised into the level.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from agents.protocol import GPU_READINGS, GpuLevelFigures, GpuReading, MeanMax
from agents.telemetry.nvml import NvmlGpus


@dataclass
class _Stat:
    total: float = 0.0
    count: int = 0
    max: float = float("-inf")

    def add(self, value: float) -> None:
        self.total += value
        self.count += 1
        self.max = max(self.max, value)

    def figures(self) -> MeanMax | None:
        return MeanMax(mean=self.total / self.count, max=self.max) if self.count else None


@dataclass
class _GpuStats:
    samples: int = 0
    memory_total_mib: float | None = None
    stats: dict[str, _Stat] = field(
        default_factory=lambda: {name: _Stat() for name in GPU_READINGS}
    )


class GpuSampler:
    """Samples ``gpus`` while one level runs: ``start``, then ``finish`` for its figures."""

    def __init__(
        self,
        gpus: NvmlGpus,
        *,
        period: float = 1.0,
        on_sample: Callable[[list[GpuReading]], None] | None = None,
    ):
        self.gpus = gpus
        self.period = period
        self.on_sample = on_sample
        self._per_gpu = [_GpuStats() for _ in gpus.names]
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            # Each query answers None where NVML fails it: a sample never raises.
            readings = await asyncio.to_thread(self.gpus.sample)
            self._add(readings)
            if self.on_sample is not None:
                self.on_sample(readings)
            next_at += self.period
            await asyncio.sleep(max(0.0, next_at - loop.time()))

    def _add(self, readings: list[GpuReading]) -> None:
        for reading in readings:
            gpu = self._per_gpu[reading.index]
            gpu.samples += 1
            if reading.memory_total_mib is not None:
                gpu.memory_total_mib = reading.memory_total_mib
            for name, stat in gpu.stats.items():
                value = getattr(reading, name)
                if value is not None:
                    stat.add(value)

    async def finish(self) -> list[GpuLevelFigures]:
        """Stops sampling; each GPU's figures over the samples taken."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return [
            GpuLevelFigures(
                index=index,
                name=name,
                samples=gpu.samples,
                memory_total_mib=gpu.memory_total_mib,
                **{reading: stat.figures() for reading, stat in gpu.stats.items()},
            )
            for index, (name, gpu) in enumerate(zip(self.gpus.names, self._per_gpu, strict=True))
        ]
