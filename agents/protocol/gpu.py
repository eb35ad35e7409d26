"""GPU telemetry as the agent reports it (protocol 7): the readings of each GPU of the pod,
sampled from NVML about every second while a level runs.

Guarantees: every reading is a number NVML gave, or None where the board does not report it
(power on some boards, for instance) — never a made-up zero; a level's figures are the mean
and maximum over its samples, per GPU, in the GPUs' NVML order; bounded in size like every
protocol message (at most ``MAX_GPUS`` GPUs).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from agents.protocol.fields import Count, FiniteFloat
from agents.protocol.strict import StrictModel

MAX_GPUS = 64
GpuIndex = Annotated[int, Field(ge=0, lt=MAX_GPUS)]
Reading = Annotated[float, Field(ge=0, allow_inf_nan=False)]
# What each GPU reports, with its unit: the names of ``GpuReading`` and ``GpuLevelFigures``.
GPU_READINGS = {
    "utilization_pct": "%",
    "memory_used_mib": "MiB",
    "power_w": "W",
    "sm_clock_mhz": "MHz",
    "temperature_c": "°C",
}


class GpuReading(StrictModel):
    """One sample of one GPU: ``level_progress`` carries each GPU's latest."""

    index: GpuIndex
    utilization_pct: Reading | None = None
    memory_used_mib: Reading | None = None
    memory_total_mib: Reading | None = None
    power_w: Reading | None = None
    sm_clock_mhz: Reading | None = None
    temperature_c: Reading | None = None


class MeanMax(StrictModel):
    """A reading over a level's samples."""

    mean: FiniteFloat
    max: FiniteFloat


class GpuLevelFigures(StrictModel):
    """One GPU over one level: its name, how many samples were taken, and each reading's mean
    and maximum (None: the board never reported it)."""

    index: GpuIndex
    name: str = Field(max_length=100)
    samples: Count
    memory_total_mib: Reading | None = None
    utilization_pct: MeanMax | None = None
    memory_used_mib: MeanMax | None = None
    power_w: MeanMax | None = None
    sm_clock_mhz: MeanMax | None = None
    temperature_c: MeanMax | None = None


GpuReadings = Annotated[list[GpuReading], Field(max_length=MAX_GPUS)]
GpuLevel = Annotated[list[GpuLevelFigures], Field(max_length=MAX_GPUS)]
