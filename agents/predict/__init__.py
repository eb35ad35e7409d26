"""Predict before renting: one serve configuration's benchmark run on the vLLM simulator
offline, in simulated time (``agents.predict.offline``), for ``benchsite-agent predict``
and search strategies that screen a grid before any GPU is rented.

Guarantees: ``predict_trial`` never raises for a configuration vLLM would refuse — the
prediction says so (``refusal``) with vLLM's kind of message, as the simulator's server
would print it; everything it returns is simulated and says so (``simulated``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agents.engines.sim.scheduler import Scheduler
from agents.engines.sim.startup import cold_start_seconds
from agents.hardware import (
    Efficiency,
    GpuProfile,
    ModelFacts,
    StartRefusal,
    StepModel,
    start_check,
)
from agents.hardware.roofline import DEFAULT_EFFICIENCY
from agents.loadgen.config import BenchConfig
from agents.predict.offline import OfflineBench, OfflineBenchResult

__all__ = ["OfflineBench", "OfflineBenchResult", "TrialPrediction", "predict_trial"]


@dataclass(frozen=True)
class TrialPrediction:
    """One configuration's simulated benchmark: its levels (``bench --json``'s keys) and
    capacity, or why vLLM would refuse to start it; the simulated seconds its start-up and
    its levels would take on the GPU."""

    flags: dict
    levels: list[dict] = field(default_factory=list)
    capacity: dict | None = None
    refusal: str | None = None  # vLLM's kind of message
    refusal_summary: str | None = None  # the same in a few words, for a page
    kv_cache_tokens: int | None = None
    cold_start_seconds: float = 0.0
    level_seconds: float = 0.0
    simulated: bool = True

    @property
    def starts(self) -> bool:
        return self.refusal is None

    @property
    def gpu_seconds(self) -> float:
        """Seconds of the pod's time this trial would take: its start-up and its levels."""
        return self.cold_start_seconds + self.level_seconds

    def as_json(self) -> dict:
        return {
            "simulated": True,
            "flags": self.flags,
            "starts": self.starts,
            "refusal": self.refusal,
            "refusal_summary": self.refusal_summary,
            "kv_cache_tokens": self.kv_cache_tokens,
            "cold_start_seconds": self.cold_start_seconds,
            "level_seconds": self.level_seconds,
            "levels": self.levels,
            "capacity": self.capacity,
        }


def predict_trial(
    model: ModelFacts,
    gpu: GpuProfile,
    flags: Mapping[str, object],
    config: BenchConfig,
    *,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    intervals: bool = True,
) -> TrialPrediction:
    """The simulated benchmark of ``model`` served with ``flags`` (protocol names, checked)
    on ``gpu`` under ``config``; ``efficiency``: the step model's constants (a calibration's,
    or the defaults); ``intervals``: False skips the levels' confidence intervals."""
    try:
        settings, plan = start_check(model, gpu, flags)
    except StartRefusal as refusal:
        return TrialPrediction(dict(flags), refusal=str(refusal), refusal_summary=refusal.summary)
    scheduler = Scheduler(settings, StepModel(model, gpu, settings, plan, efficiency))
    result = OfflineBench(config, scheduler, intervals=intervals).run()
    return TrialPrediction(
        dict(flags),
        levels=result.levels,
        capacity=result.capacity,
        kv_cache_tokens=plan.kv_tokens,
        cold_start_seconds=sum(cold_start_seconds(model, settings).values()),
        level_seconds=result.simulated_seconds,
    )
