"""Memory plan and step time: where vLLM's KV cache comes from and how long a step takes.

Guarantees:

- ``plan_memory`` follows vLLM's start-up accounting per GPU: ``gpu_memory_utilization`` x
  memory, minus the weights (divided by the tensor-parallel size), minus an activation
  reserve (the peak of a ``max_num_batched_tokens`` forward pass, sampler logits for
  ``max_num_seqs``, non-torch memory and CUDA graphs), leaves the KV cache, cut into
  blocks. It raises ``SimRefusal`` with vLLM's kind of message where vLLM refuses to start.
- ``step_time`` is a roofline: max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth)
  per GPU, plus a fixed per-step overhead and, with tensor parallelism, two all-reduces per
  layer. FLOPs count the linear layers for every scheduled token, attention over each
  token's context, and the LM head for each sampled token; bytes count every weight once
  per step plus each request's KV cache read and the new KV written.
- Pure arithmetic: the same inputs always give the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.engines.sim.hardware import DTYPE_BYTES, GIB, GpuProfile, ModelSpec


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


DEFAULT_EFFICIENCY = Efficiency()


class SimRefusal(Exception):
    """vLLM would refuse this configuration at start-up; the message is vLLM-worded."""


@dataclass(frozen=True)
class ServeSettings:
    """The serve flags the simulator models, with vLLM's defaults for a given GPU."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    gpu_memory_utilization: float
    tensor_parallel_size: int
    pipeline_parallel_size: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    block_size: int
    kv_cache_dtype: str
    enforce_eager: bool

    @classmethod
    def from_flags(
        cls, flags: Mapping[str, object], model: ModelSpec, gpu: GpuProfile
    ) -> ServeSettings:
        """Fills what ``flags`` leaves out the way vLLM 0.11+ does for ``vllm serve``."""
        # vLLM's defaults depend on the GPU's memory (engine/arg_utils.py).
        if gpu.memory_gb >= 160:
            batched, seqs = 16384, 1024
        elif gpu.memory_gb >= 70 and "a100" not in gpu.name.lower():
            batched, seqs = 8192, 1024
        else:
            batched, seqs = 2048, 256
        max_model_len = int(flags.get("max_model_len") or model.max_position_embeddings)
        chunked = flags.get("enable_chunked_prefill")
        settings = cls(
            max_model_len=max_model_len,
            max_num_seqs=int(flags.get("max_num_seqs") or seqs),
            max_num_batched_tokens=int(flags.get("max_num_batched_tokens") or batched),
            gpu_memory_utilization=float(flags.get("gpu_memory_utilization") or 0.9),
            tensor_parallel_size=int(flags.get("tensor_parallel_size") or 1),
            pipeline_parallel_size=int(flags.get("pipeline_parallel_size") or 1),
            # Both are on by default in vLLM's V1 engine.
            enable_prefix_caching=flags.get("enable_prefix_caching") is not False,
            enable_chunked_prefill=chunked is not False,
            block_size=int(flags.get("block_size") or 16),
            kv_cache_dtype=str(flags.get("kv_cache_dtype") or "auto"),
            enforce_eager=bool(flags.get("enforce_eager")),
        )
        settings.check(model)
        return settings

    def check(self, model: ModelSpec) -> None:
        if self.max_model_len > model.max_position_embeddings:
            raise SimRefusal(
                f"ValueError: User-specified max_model_len ({self.max_model_len}) is greater "
                f"than the derived max_model_len (max_position_embeddings="
                f"{model.max_position_embeddings} in model's config.json)."
            )
        if model.num_attention_heads % self.tensor_parallel_size:
            raise SimRefusal(
                f"ValueError: Total number of attention heads ({model.num_attention_heads}) "
                f"must be divisible by tensor parallel size ({self.tensor_parallel_size})."
            )
        if self.pipeline_parallel_size != 1:
            raise SimRefusal(
                "error: argument --pipeline-parallel-size: the simulator does not model "
                "pipeline parallelism (use 1)"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise SimRefusal(
                f"ValueError: max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller "
                f"than max_model_len ({self.max_model_len}). This effectively limits the "
                "maximum sequence length to max_num_batched_tokens and makes vLLM reject "
                "longer sequences. Please increase max_num_batched_tokens or decrease "
                "max_model_len."
            )


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory as vLLM would lay it out; KV figures are per GPU."""

    budget_bytes: float
    weight_bytes: float
    reserve_bytes: float
    kv_bytes: float
    kv_bytes_per_token: float
    num_blocks: int
    block_size: int

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size


def kv_bytes_per_token(model: ModelSpec, settings: ServeSettings) -> float:
    """K and V of every layer for one token on one GPU (KV heads are split, or replicated
    when there are fewer of them than GPUs)."""
    kv_dtype = model.dtype if settings.kv_cache_dtype == "auto" else "fp8"
    heads = max(1, model.num_kv_heads // settings.tensor_parallel_size)
    return 2 * model.num_layers * heads * model.head_dim * DTYPE_BYTES[kv_dtype]


def plan_memory(model: ModelSpec, gpu: GpuProfile, settings: ServeSettings) -> MemoryPlan:
    """The KV cache vLLM would allocate; raises ``SimRefusal`` where vLLM refuses."""
    tp = settings.tensor_parallel_size
    total = gpu.memory_bytes
    budget = settings.gpu_memory_utilization * total
    weights = model.weight_bytes / tp
    if weights > budget:
        raise SimRefusal(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{weights / GIB:.2f} GiB for the weights. GPU 0 has a total capacity of "
            f"{total / GIB:.2f} GiB, of which gpu_memory_utilization="
            f"{settings.gpu_memory_utilization} allows {budget / GIB:.2f} GiB."
        )
    act_bytes = DTYPE_BYTES[model.dtype]
    activations = (
        settings.max_num_batched_tokens
        * (4 * model.hidden_size + 2 * model.ffn_size / tp)
        * act_bytes
    )
    logits = settings.max_num_seqs * model.vocab_size * 4  # float32 logits in the sampler
    non_torch = 0.6 * GIB + (0.0 if settings.enforce_eager else 0.5 * GIB)  # + CUDA graphs
    reserve = activations + logits + non_torch
    kv = budget - weights - reserve
    if kv <= 0:
        raise SimRefusal(
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine."
        )
    per_token = kv_bytes_per_token(model, settings)
    num_blocks = int(kv // (per_token * settings.block_size))
    plan = MemoryPlan(budget, weights, reserve, kv, per_token, num_blocks, settings.block_size)
    needed = settings.max_model_len * per_token
    if needed > kv:
        estimated = int(kv // per_token)
        estimated -= estimated % settings.block_size
        raise SimRefusal(
            f"ValueError: To serve at least one request with the model's max seq len "
            f"({settings.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which "
            f"is larger than the available KV cache memory ({kv / GIB:.2f} GiB). Based on "
            f"the available memory, the estimated maximum model length is {estimated}. Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine."
        )
    return plan


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
        model: ModelSpec,
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
        act_bytes = tokens * self.model.hidden_size * DTYPE_BYTES[self.model.dtype] * 8
        compute_s = flops / self._flops_rate
        memory_s = (weight_bytes + kv_bytes + act_bytes) / self._bytes_rate
        comm_s = 0.0
        if tp > 1:
            payload = tokens * self.model.hidden_size * DTYPE_BYTES[self.model.dtype]
            per_reduce = self.eff.allreduce_latency_s + 2 * (tp - 1) / tp * payload / (
                self.gpu.link_gbps * 1e9
            )
            comm_s = 2 * self.model.num_layers * per_reduce
        seconds = max(compute_s, memory_s) + comm_s + self._overhead
        return StepCost(seconds, compute_s, memory_s, comm_s)


def cold_start_seconds(model: ModelSpec, settings: ServeSettings) -> dict[str, float]:
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
