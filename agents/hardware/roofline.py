"""Step time: the roofline every Benchsite time figure rests on (the simulator's steps and
the site's pre-run estimate).

Guarantees:

- ``StepModel.cost`` is max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) per
  GPU, plus a fixed per-step overhead and, with tensor parallelism, two all-reduces per
  layer. FLOPs count the linear layers for every scheduled token, attention over each
  token's context, and the LM head for each sampled token; bytes count every weight once
  per step plus each request's KV cache read and the new KV written; the host's
  ``per_sequence_s`` is added for each request in the step.
- Pure arithmetic: the same inputs always give the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agents.hardware.gpus import GpuProfile
from agents.hardware.memory import MemoryPlan, ServeSettings
from agents.hardware.models import ModelFacts


@dataclass(frozen=True)
class Efficiency:
    """What fraction of the datasheet peaks a real step reaches, and fixed costs.

    Defaults are set from the calibration in docs/simulator.md: kernels rarely pass 60 %
    of peak FLOP/s on short batches, and decode reads memory at about 80 % of peak.
    """

    flops: float = 0.55
    bandwidth: float = 0.85
    step_overhead_s: float = 0.0010  # scheduling, sampling, detokenizing: CUDA graphs on
    eager_overhead_s: float = 0.0040  # extra per step with --enforce-eager
    allreduce_latency_s: float = 12e-6
    # CPU-side cost per request in the step (input preparation, sampling, detokenizing,
    # streaming its output): the part of a step that grows with the batch on the host.
    per_sequence_s: float = 0.0


DEFAULT_EFFICIENCY = Efficiency()


@dataclass(frozen=True)
class StepCost:
    seconds: float
    compute_s: float
    memory_s: float
    comm_s: float


class StepModel:
    """Step time of one engine step for a batch of ``(new_tokens, context_before)``."""

    def __init__(
        self,
        model: ModelFacts,
        gpu: GpuProfile,
        settings: ServeSettings,
        plan: MemoryPlan,
        efficiency: Efficiency = DEFAULT_EFFICIENCY,
    ):
        self.model = model
        self.gpu = gpu
        self.settings = settings
        self.plan = plan
        self.eff = efficiency
        tp = settings.tensor_parallel_size
        embedding = model.vocab_size * model.hidden_size
        self._linear_params = max(model.parameters - 2 * embedding, 0.0)
        self._head_params = embedding
        self._attn_unit = 4 * model.num_layers * model.num_attention_heads * model.head_dim
        self._flops_rate = gpu.bf16_tflops * 1e12 * efficiency.flops * tp
        self._bytes_rate = gpu.bandwidth_tbps * 1e12 * efficiency.bandwidth
        self._overhead = efficiency.step_overhead_s + (
            efficiency.eager_overhead_s if settings.enforce_eager else 0.0
        )

    def cost(self, batch: Sequence[tuple[int, int]], sampled: int) -> StepCost:
        """``batch``: (tokens computed this step, tokens already in the request's KV);
        ``sampled``: how many requests sample a token at the end of the step."""
        tp = self.settings.tensor_parallel_size
        tokens = 0
        attended = 0.0
        context = 0
        for new, before in batch:
            tokens += new
            # Each new token attends to everything before it and to itself.
            attended += new * before + new * (new + 1) / 2
            context += before + new
        flops = (
            2 * self._linear_params * tokens
            + 2 * self._head_params * sampled
            + self._attn_unit * attended
        )
        # Weights are read once per step on every GPU (each holds 1/tp of them).
        weight_bytes = self.model.weight_bytes / tp
        kv_bytes = context * self.plan.kv_bytes_per_token
        act_bytes = tokens * self.model.hidden_size * self.model.activation_bytes * 8
        compute_s = flops / self._flops_rate
        memory_s = (weight_bytes + kv_bytes + act_bytes) / self._bytes_rate
        comm_s = 0.0
        if tp > 1:
            payload = tokens * self.model.hidden_size * self.model.activation_bytes
            per_reduce = self.eff.allreduce_latency_s + 2 * (tp - 1) / tp * payload / (
                self.gpu.link_gbps * 1e9
            )
            comm_s = 2 * self.model.num_layers * per_reduce
        seconds = (
            max(compute_s, memory_s)
            + comm_s
            + self._overhead
            + self.eff.per_sequence_s * len(batch)
        )
        return StepCost(seconds, compute_s, memory_s, comm_s)
