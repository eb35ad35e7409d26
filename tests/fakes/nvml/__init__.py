"""The NVML stand-in (``fake_nvml.c``), built for the tests with the system's C compiler and
loaded under NVML's own soname, so that the real ``nvidia-ml-py`` binding (which opens
``libnvidia-ml.so.1``) talks to it in this process, and in child processes given
``LD_LIBRARY_PATH``. The devices it reports come from the file ``BENCHSITE_FAKE_NVML`` names
(see the C source), written with ``write_gpus``."""

from __future__ import annotations

import ctypes
import subprocess
from dataclasses import dataclass
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
SONAME = "libnvidia-ml.so.1"
ENV = "BENCHSITE_FAKE_NVML"


@dataclass(frozen=True)
class FakeGpu:
    """One device's readings as the stand-in reports them (a negative one: not supported)."""

    name: str = "NVIDIA H100 80GB HBM3"
    utilization_pct: int = 0
    memory_used_mib: int = 0
    memory_total_mib: int = 81559
    power_mw: int = 70_000
    sm_clock_mhz: int = 1980
    temperature_c: int = 35

    def line(self) -> str:
        readings = (
            self.utilization_pct,
            self.memory_used_mib,
            self.memory_total_mib,
            self.power_mw,
            self.sm_clock_mhz,
            self.temperature_c,
        )
        return "|".join((self.name, *map(str, readings)))


def build(directory: Path) -> Path:
    """Compiles the stand-in into ``directory`` as ``libnvidia-ml.so.1``."""
    library = directory / SONAME
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-O1", "-Wall", "-Werror", f"-Wl,-soname,{SONAME}",
         "-o", str(library), str(SOURCE)],
        check=True,
    )  # fmt: skip  # flag, value
    return library


def preload(library: Path) -> None:
    """Loads the stand-in into this process: NVML's binding then finds it by its soname."""
    ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)


def write_gpus(path: Path, gpus: list[FakeGpu]) -> None:
    """The devices the stand-in reports from now on (read again on every NVML call)."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text("".join(gpu.line() + "\n" for gpu in gpus))
    temporary.replace(path)  # whole, never half-written when the agent reads it
