"""The GPUs of this host through NVML (the ``nvidia-ml-py`` binding, ``pynvml``).

Guarantees:

- ``open_gpus`` answers None, never raises, on a host without NVML (no library, no driver,
  no device): such a host reports no GPU telemetry, without error.
- A reading the board does not give (NVML answers "not supported", or any other NVML error
  for that one query) is None in that sample; the other readings stand.
- Units are the protocol's (``agents.protocol.GPU_READINGS``): percent, MiB, watts, MHz, °C.
- Every call blocks on the driver: call ``sample`` off the event loop (``sampler`` does).
- ``host_gpus`` reads the host's facts for the agent's ``hello`` the same way: each GPU's
  name and memory, the driver's version and the CUDA version it supports; None without NVML.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import pynvml

from agents.protocol import GpuReading

MIB = 1 << 20


class NvmlGpus:
    """Open NVML handles to every GPU of the host, by NVML index."""

    def __init__(self, handles: list, names: list[str]):
        self._handles = handles
        self.names = names

    def sample(self) -> list[GpuReading]:
        """Each GPU's readings now."""
        readings = []
        for index, handle in enumerate(self._handles):
            memory = _read(lambda h=handle: pynvml.nvmlDeviceGetMemoryInfo(h))
            power_mw = _read(lambda h=handle: pynvml.nvmlDeviceGetPowerUsage(h))
            readings.append(
                GpuReading(
                    index=index,
                    utilization_pct=_read(
                        lambda h=handle: float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
                    ),
                    memory_used_mib=None if memory is None else memory.used / MIB,
                    memory_total_mib=None if memory is None else memory.total / MIB,
                    power_w=None if power_mw is None else power_mw / 1000,
                    sm_clock_mhz=_read(
                        lambda h=handle: float(
                            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
                        )
                    ),
                    temperature_c=_read(
                        lambda h=handle: float(
                            pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
                        )
                    ),
                )
            )
        return readings

    def close(self) -> None:
        with contextlib.suppress(pynvml.NVMLError):  # already shut down: nothing is held
            pynvml.nvmlShutdown()


def _read(query: Callable[[], object]):
    try:
        return query()
    except pynvml.NVMLError:
        return None


def open_gpus() -> NvmlGpus | None:
    """NVML's view of this host's GPUs, or None when it has none to give."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None  # no library, or no driver: a host without GPUs
    try:
        count = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(count)]
        names = [str(pynvml.nvmlDeviceGetName(handle))[:100] for handle in handles]
    except pynvml.NVMLError:
        handles = []
    if not handles:
        pynvml.nvmlShutdown()
        return None
    return NvmlGpus(handles, names)


@dataclass(frozen=True)
class HostGpus:
    """What NVML says of the host: each GPU's (name, total MiB), the driver, CUDA."""

    gpus: list[tuple[str, int]]
    driver_version: str | None
    cuda_version: str | None  # "12.4": the highest CUDA the driver supports


def host_gpus() -> HostGpus | None:
    """The host's GPUs and driver as NVML gives them, or None on a host without NVML."""
    gpus = open_gpus()
    if gpus is None:
        return None
    try:
        readings = gpus.sample()
        driver = _read(pynvml.nvmlSystemGetDriverVersion)
        cuda = _read(pynvml.nvmlSystemGetCudaDriverVersion)
    finally:
        gpus.close()
    return HostGpus(
        gpus=[
            (name, int(reading.memory_total_mib))
            for name, reading in zip(gpus.names, readings, strict=True)
            if reading.memory_total_mib is not None
        ],
        driver_version=None if driver is None else str(driver)[:100],
        # NVML answers 1000 × major + 10 × minor (12040 is CUDA 12.4).
        cuda_version=None if not cuda else f"{cuda // 1000}.{cuda % 1000 // 10}",
    )
