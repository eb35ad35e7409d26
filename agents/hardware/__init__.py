"""Hardware facts and the maths on them, shared by the simulator and the site.

``gpus`` (each GPU's memory in GiB as CUDA reports it, bandwidth, FLOP/s), ``models`` (a
model's architecture facts and bytes per element), ``presets`` (well-known models, for the
simulator and the site alike), ``memory`` (``start_check``: does a serve configuration
start, with how much KV cache), ``roofline`` (how long an engine step takes),
``speculative`` (what a speculative_config keeps per decode step).

Pure: the standard library only, and nothing else of ``agents`` (an import contract says
so), so the site may import it as it imports ``agents.protocol``.
"""

from agents.hardware.gpus import GIB, GPUS, POD_SPEED_SPREAD, GpuProfile, gpu_profile
from agents.hardware.memory import (
    MemoryPlan,
    ServeSettings,
    StartRefusal,
    plan_memory,
    start_check,
)
from agents.hardware.models import (
    ARCHITECTURE_FACTS,
    REGISTERED_FACTS,
    WEIGHT_BYTES,
    ModelFacts,
)
from agents.hardware.presets import MODEL_PRESETS, ModelPreset, load_model_facts
from agents.hardware.roofline import DEFAULT_EFFICIENCY, Efficiency, StepCost, StepModel
from agents.hardware.speculative import SpecDecoding, spec_decoding

__all__ = [
    "ARCHITECTURE_FACTS",
    "DEFAULT_EFFICIENCY",
    "GIB",
    "GPUS",
    "MODEL_PRESETS",
    "POD_SPEED_SPREAD",
    "REGISTERED_FACTS",
    "WEIGHT_BYTES",
    "Efficiency",
    "GpuProfile",
    "MemoryPlan",
    "ModelFacts",
    "ModelPreset",
    "ServeSettings",
    "SpecDecoding",
    "StartRefusal",
    "StepCost",
    "StepModel",
    "gpu_profile",
    "load_model_facts",
    "plan_memory",
    "spec_decoding",
    "start_check",
]
