"""The host's own telemetry, sampled beside the engine it runs: GPU readings from NVML
(``nvml``) taken about every second while a level runs (``sampler``), level by level of a
benchmark's events (``levels``)."""

from agents.telemetry.levels import GpuLevels
from agents.telemetry.nvml import HostGpus, NvmlGpus, host_gpus, open_gpus
from agents.telemetry.sampler import GpuSampler

__all__ = ["GpuLevels", "GpuSampler", "HostGpus", "NvmlGpus", "host_gpus", "open_gpus"]
