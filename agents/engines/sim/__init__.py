"""The vLLM performance simulator: an OpenAI-compatible server whose timing comes from a
model of vLLM's continuous batching on a given GPU (see docs/simulator.md).

``hardware`` (GPU profiles, model facts), ``perf`` (memory plan, roofline step time),
``scheduler`` (V1-style scheduler and KV blocks), ``server`` (HTTP, streaming, /metrics).
Everything it serves is labelled simulated.
"""

from agents.engines.sim.hardware import GPUS, MODEL_PRESETS, GpuProfile, ModelSpec, gpu_profile
from agents.engines.sim.perf import ServeSettings, SimRefusal, StepModel, plan_memory
from agents.engines.sim.scheduler import Scheduler, SimRequest, closed_loop, simulate

__all__ = [
    "GPUS",
    "MODEL_PRESETS",
    "GpuProfile",
    "ModelSpec",
    "Scheduler",
    "ServeSettings",
    "SimRefusal",
    "SimRequest",
    "StepModel",
    "closed_loop",
    "gpu_profile",
    "plan_memory",
    "simulate",
]
