"""The pod's own telemetry, sampled by the agent beside the engine it runs: GPU readings
from NVML (``nvml``) taken about every second while a level runs (``sampler``)."""

from agents.telemetry.nvml import NvmlGpus, open_gpus
from agents.telemetry.sampler import GpuSampler

__all__ = ["GpuSampler", "NvmlGpus", "open_gpus"]
