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
from pathlib import Path

from agents.engines.sim.scheduler import make_scheduler
from agents.engines.sim.startup import cold_start_seconds
from agents.hardware import (
    Efficiency,
    GpuProfile,
    ModelFacts,
    StartRefusal,
)
from agents.hardware.roofline import DEFAULT_EFFICIENCY
from agents.loadgen.config import BenchConfig
from agents.loadgen.workload import config_from_workload
from agents.predict.offline import OfflineBench, OfflineBenchResult, WorkTooLarge
from agents.protocol import CapacitySearch, Slos, Workload

__all__ = [
    "OFFLINE_URL",
    "OfflineBench",
    "OfflineBenchResult",
    "TrialPrediction",
    "WorkTooLarge",
    "predict_trial",
    "predict_workload",
]

# What a prediction's configuration names as its server: nothing was sent over a network.
OFFLINE_URL = "simulator://offline"


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
    vllm_version: str | None = None,
    intervals: bool = True,
    work_budget: int | None = None,
) -> TrialPrediction:
    """The simulated benchmark of ``model`` served with ``flags`` (protocol names, checked)
    on ``gpu`` under ``config``; ``efficiency``: the step model's constants (a calibration's,
    or the defaults); ``vllm_version``: the release whose defaults fill the flags left out
    (None: the newest modelled); ``intervals``: False skips the levels' confidence
    intervals; ``work_budget``: raises ``WorkTooLarge`` past that many simulated
    request-steps."""
    try:
        scheduler = make_scheduler(
            model, gpu, flags, vllm_version=vllm_version, efficiency=efficiency
        )
    except StartRefusal as refusal:
        return TrialPrediction(dict(flags), refusal=str(refusal), refusal_summary=refusal.summary)
    settings, plan = scheduler.settings, scheduler.step_model.plan
    result = OfflineBench(config, scheduler, intervals=intervals, work_budget=work_budget).run()
    return TrialPrediction(
        dict(flags),
        levels=result.levels,
        capacity=result.capacity,
        kv_cache_tokens=plan.kv_tokens,
        cold_start_seconds=sum(cold_start_seconds(model, settings).values()),
        level_seconds=result.simulated_seconds,
    )


def predict_workload(
    model: ModelFacts,
    gpu: GpuProfile,
    flags: Mapping[str, object],
    workload: Workload,
    slos: Slos | None,
    *,
    dataset_path: Path | None = None,
    efficiency: Efficiency = DEFAULT_EFFICIENCY,
    vllm_version: str | None = None,
    intervals: bool = False,
    work_budget: int | None = None,
) -> TrialPrediction:
    """A trial of an experiment's ``workload`` predicted (``predict_trial``), as the site's
    builder and search ask for it: with SLOs, a capacity search always runs (the workload's
    own, or one with the defaults), since capacity at the SLOs is what a prediction is for;
    intervals only when asked (a prediction ranks configurations, it declares nothing)."""
    if slos is not None and slos.given and workload.capacity is None:
        workload = workload.model_copy(update={"capacity": CapacitySearch()})
    config = config_from_workload(
        workload,
        base_url=OFFLINE_URL,
        model=model.name,
        slos=slos,
        dataset_path=dataset_path,
        metrics_url=None,
    )
    return predict_trial(
        model,
        gpu,
        flags,
        config,
        efficiency=efficiency,
        vllm_version=vllm_version,
        intervals=intervals,
        work_budget=work_budget,
    )
