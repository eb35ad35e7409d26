"""The NVIDIA driver a GPU type's pods run, as their agents report it.

Guarantee: ``gpu_type_driver_seen`` records on the run's pod GPU type (the one it was placed
on, else the experiment's) the driver a real-vLLM pod's agent reported, with when; a hello
without a driver, or from the simulator or an endpoint, changes nothing. Only the driver's
version is kept: it is a fact of the provider's hosts, the same for every tenant.
"""

from __future__ import annotations

from datetime import datetime

from runs.models import GpuType, Run
from runs.run_as_started import run_engine


def gpu_type_driver_seen(run: Run, *, driver: str | None, now: datetime) -> None:
    """See the module docstring."""
    engine = run_engine(run)
    if engine.kind != "vllm" or not driver:
        return
    GpuType.objects.filter(id=run.pod_gpu_type or engine.gpu_type).update(
        driver_version=driver[: GpuType._meta.get_field("driver_version").max_length],
        driver_seen_at=now,
    )
