"""The simulator's start-up phases: how long each part of a simulated ``vllm serve`` start
takes (the log lines the server prints between them say what vLLM would)."""

from __future__ import annotations

import math

from agents.hardware import ModelFacts, ServeSettings


def cold_start_seconds(model: ModelFacts, settings: ServeSettings) -> dict[str, float]:
    """Simulated start-up phases (s): imports and config, weight loading at about 2 GB/s
    per GPU from local disk, profiling plus KV allocation, CUDA graph capture."""
    weights = model.weight_bytes / settings.tensor_parallel_size
    return {
        "init": 12.0,
        "weights": 1.0 + weights / 2e9,
        "profile": 3.0 + math.log2(settings.tensor_parallel_size + 1),
        "graphs": 0.0 if settings.enforce_eager else 8.0 + 0.1 * model.num_layers,
        "api": 2.0,
    }
