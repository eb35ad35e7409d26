"""What a brief measurement is: the experiment's benchmark at a fraction of its effort.

Guarantees: effort 1 is the benchmark unchanged; below 1 each level holds proportionally
fewer requests (at least ``MIN_REQUESTS``) and the capacity search takes proportionally fewer
probes (at least 2) with a proportionally wider tolerance (at most 50 %) and no repeat of its
bracket: a coarse bracket, found cheaply, that ranks configurations without pinning them.
"""

from __future__ import annotations

from dataclasses import replace

from agents.loadgen.config import BenchConfig

MIN_REQUESTS = 10


def at_effort(config: BenchConfig, effort: float) -> BenchConfig:
    """``config`` at ``effort`` (0 < effort ≤ 1; module docstring)."""
    if not 0 < effort <= 1:
        raise ValueError(f"effort must be in (0, 1], got {effort}")
    if effort == 1:
        return config
    capacity = config.capacity
    if capacity is not None:
        capacity = capacity.model_copy(
            update={
                "max_probes": max(2, round(capacity.max_probes * effort)),
                "tolerance_pct": min(50.0, capacity.tolerance_pct / effort),
                "repeat_bracket": False,
            }
        )
    return replace(
        config,
        num_prompts=max(MIN_REQUESTS, round(config.num_prompts * effort)),
        capacity=capacity,
    )
