"""Will vLLM start, and with how much KV cache: the one fit check of Benchsite.

Guarantees:

- ``start_check`` is the only answer to "does this serve configuration start on this GPU":
  the simulator refuses to start exactly where it raises, and the site's builder, fit table
  and estimate call it too. It fills the flags a configuration leaves out as ``vllm serve``
  does (``ServeSettings.from_flags``), then plans memory.
- ``plan_memory`` follows vLLM 0.11's start-up accounting per GPU: ``gpu_memory_utilization``
  x the usable total (``GpuProfile.memory_bytes``, in GiB as CUDA reports it), minus the
  weights at their served width (one GPU's share, ``weight_bytes_per_gpu``), minus the profile
  run's peak (``profile_peak_bytes``) and the memory outside torch, leaves the KV cache, cut
  into blocks; it refuses where vLLM's own check does (one ``max_model_len`` request must
  fit, in whole blocks).
- Data, expert and decode-context parallelism are vLLM's (``vllm/config/parallel.py`` and
  ``docs/serving/{data,expert,context}_parallel_deployment.md`` on vLLM's main branch,
  read 2026-12; DCP from vLLM PR #23734): a plan is one data-parallel rank's, each with its
  own KV cache; a MoE model's routed experts are sharded over TP x DP GPUs (whole experts
  with ``enable_expert_parallel``, a 1/(TP x DP) slice of each without), the rest of its
  weights over TP; decode context parallelism stores each sequence's KV cache interleaved
  over DCP of the TP GPUs, so a rank holds DCP times the tokens.
- ``StartRefusal`` carries vLLM's kind of message and a short ``summary`` for people.
- Pure arithmetic: the same inputs always give the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from agents.hardware.gpus import GIB, GpuProfile
from agents.hardware.models import WEIGHT_BYTES, ModelFacts
from agents.hardware.precision import served_weight_dtype
from agents.hardware.speculative import SpecDecoding, spec_decoding
from agents.hardware.vllm_defaults import batch_defaults


class StartRefusal(Exception):
    """vLLM would refuse this configuration at start-up; the message is vLLM-worded, the
    ``summary`` says in a few words what is wrong, for a page."""

    def __init__(self, message: str, *, summary: str):
        super().__init__(message)
        self.summary = summary


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
    quantization: str | None = None
    dtype: str = "auto"
    data_parallel_size: int = 1
    enable_expert_parallel: bool = False
    decode_context_parallel_size: int = 1
    speculative: SpecDecoding | None = None

    @classmethod
    def from_flags(
        cls, flags: Mapping[str, object], model: ModelFacts, gpu: GpuProfile
    ) -> ServeSettings:
        """Fills what ``flags`` leaves out the way the newest vLLM the defaults table knows
        does for ``vllm serve`` (``vllm_defaults``; a caller that knows the version fills
        them from the same table first)."""
        defaults = batch_defaults(None, gpu)
        batched, seqs = defaults.max_num_batched_tokens, defaults.max_num_seqs
        max_model_len = int(flags.get("max_model_len") or model.max_position_embeddings)
        chunked = flags.get("enable_chunked_prefill")
        try:
            speculative = spec_decoding(flags.get("speculative_config"))
        except ValueError as exc:
            raise StartRefusal(
                f"error: argument --speculative-config: {exc}",
                summary="the simulator cannot model this speculative_config",
            ) from None
        settings = cls(
            speculative=speculative,
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
            quantization=str(flags["quantization"]) if flags.get("quantization") else None,
            dtype=str(flags.get("dtype") or "auto"),
            data_parallel_size=int(flags.get("data_parallel_size") or 1),
            enable_expert_parallel=bool(flags.get("enable_expert_parallel")),
            decode_context_parallel_size=int(flags.get("decode_context_parallel_size") or 1),
        )
        settings.check(model)
        return settings

    def served(self, model: ModelFacts) -> ModelFacts:
        """``model`` with its weights at the width vLLM stores them at under these flags
        (``--quantization fp8`` on a 16-bit checkpoint: FP8); raises ``StartRefusal`` where
        vLLM would not load the checkpoint with them."""
        try:
            weights = served_weight_dtype(model.dtype, self.quantization, self.dtype)
        except ValueError as exc:
            raise StartRefusal(
                f"ValueError: {exc}", summary="the quantization flag does not fit the checkpoint"
            ) from exc
        return model if weights == model.dtype else dataclasses.replace(model, dtype=weights)

    def moe_group(self, model: ModelFacts) -> int:
        """The GPUs a MoE model's routed experts are sharded over: TP x DP (vLLM's
        ParallelConfig: "MoE layers will be sharded according to the product of the tensor
        [...] and data parallel sizes"); TP for a dense model, whose replicas share nothing."""
        if not model.num_experts:
            return self.tensor_parallel_size
        return self.tensor_parallel_size * self.data_parallel_size

    def expert_parallel(self, model: ModelFacts) -> bool:
        """Whether the MoE layers hold whole experts per GPU: ``enable_expert_parallel`` on a
        MoE model over more than one GPU. vLLM ignores the flag otherwise (its FusedMoE uses
        expert parallelism only when TP x DP > 1)."""
        return self.enable_expert_parallel and self.moe_group(model) > 1

    @property
    def gpu_count(self) -> int:
        """The GPUs the server occupies: vLLM's ``world_size_across_dp``, TP x PP x DP (DCP
        reuses the TP GPUs)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size * self.data_parallel_size

    def check(self, model: ModelFacts) -> None:
        self.served(model)
        if self.max_model_len > model.max_position_embeddings:
            raise StartRefusal(
                f"ValueError: User-specified max_model_len ({self.max_model_len}) is greater "
                f"than the derived max_model_len (max_position_embeddings="
                f"{model.max_position_embeddings} in model's config.json).",
                summary="max_model_len is beyond the model's context",
            )
        if model.num_attention_heads % self.tensor_parallel_size:
            raise StartRefusal(
                f"ValueError: Total number of attention heads ({model.num_attention_heads}) "
                f"must be divisible by tensor parallel size ({self.tensor_parallel_size}).",
                summary="the attention heads do not divide by tensor_parallel_size",
            )
        tp, kv_heads = self.tensor_parallel_size, model.num_kv_heads
        # vLLM's QKVParallelLinear splits the KV heads over the GPUs, or replicates each on
        # tp / kv_heads of them; either way one must divide the other. MLA has no KV heads to
        # split (its latent is whole on every GPU), so this does not apply to it.
        if not model.kv_lora_rank and (kv_heads % tp if kv_heads >= tp else tp % kv_heads):
            larger, smaller = max(kv_heads, tp), min(kv_heads, tp)
            raise StartRefusal(
                f"AssertionError: {larger} is not divisible by {smaller} (the model's "
                f"{kv_heads} KV heads over tensor parallel size {tp})",
                summary="the KV heads and tensor_parallel_size do not divide one another",
            )
        # vLLM's ParallelConfig: DCP reuses the TP ranks, splitting each TP group.
        dcp = self.decode_context_parallel_size
        if tp % dcp:
            raise StartRefusal(
                f"ValueError: tp_size={tp} must be divisible by dcp_size={dcp}.",
                summary="decode_context_parallel_size does not divide tensor_parallel_size",
            )
        if self.pipeline_parallel_size != 1:
            raise StartRefusal(
                "error: argument --pipeline-parallel-size: the simulator does not model "
                "pipeline parallelism (use 1)",
                summary="the simulator does not model pipeline parallelism",
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise StartRefusal(
                f"ValueError: max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller "
                f"than max_model_len ({self.max_model_len}). This effectively limits the "
                "maximum sequence length to max_num_batched_tokens and makes vLLM reject "
                "longer sequences. Please increase max_num_batched_tokens or decrease "
                "max_model_len.",
                summary="max_num_batched_tokens is below max_model_len without chunked prefill",
            )
        # vLLM's SchedulerConfig (every V1 release): a step must hold one token of each
        # running sequence.
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise StartRefusal(
                f"ValueError: max_num_batched_tokens ({self.max_num_batched_tokens}) must be "
                f"greater than or equal to max_num_seqs ({self.max_num_seqs}).",
                summary="max_num_batched_tokens is below max_num_seqs",
            )


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory as vLLM would lay it out; KV bytes are per GPU. ``kv_bytes_per_token``
    is one GPU's share of a token's KV (the whole of it over DCP); ``num_blocks`` and
    ``kv_tokens`` count one data-parallel rank's cache, its DCP GPUs together."""

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


# What vLLM 0.11 holds back from the KV cache besides the weights
# (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``; ``vllm/utils``,
# ``memory_profiling``): the increase of torch's peak allocation over one profile run and the
# memory outside torch (CUDA libraries' workspaces, NCCL) that grew since the worker started.
# CUDA graphs are captured after the KV cache is allocated, out of what
# gpu_memory_utilization leaves free, so 0.11 does not subtract them (vLLM 0.21 and later
# subtract an estimate by default; that is not modelled).
#
# Outside torch on one GPU: a V1 start of Llama 3.1 8B on an H100 logged "non_torch_memory
# takes 0.35GiB; PyTorch activation peak memory takes 1.24GiB" (the second is
# ``profile_peak_bytes``'s 1.22 GiB). With tensor parallelism NCCL and the custom all-reduce
# add buffers; 0.25 GiB more is assumed (no published figure was found).
NON_TORCH_BYTES = 0.35 * GIB
NON_TORCH_TP_BYTES = 0.25 * GIB
# The profile run's sampler over max_num_seqs rows of the vocabulary: the model's 16-bit
# logits, the float32 copy the sampler works on and its float32 probabilities.
SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4


def profile_peak_bytes(model: ModelFacts, settings: ServeSettings) -> float:
    """Per GPU, the torch peak of vLLM's profile run (``gpu_model_runner.profile_run``): a
    forward pass of ``max_num_batched_tokens`` dummy tokens, then the sampler over
    ``min(max_num_seqs, max_num_batched_tokens)`` rows. The forward's intermediates are freed
    before sampling, so the peak is the larger of the two.

    The forward's peak is the MLP's: its gate-and-up output (2 × FFN) and activation (FFN)
    beside the hidden state and residual; a MoE layer's fused kernel holds the same for each
    of the token's k experts plus its k outputs."""
    tp = settings.tensor_parallel_size
    tokens = settings.max_num_batched_tokens
    width = 3 * model.ffn_size / tp
    if model.num_experts:
        expert = 3 * (model.moe_intermediate_size or 0) / tp
        routed = model.num_experts_per_token * (expert + model.hidden_size)
        moe = routed + model.num_shared_experts * expert
        width = max(width if model.num_moe_layers < model.num_layers else 0.0, moe)
    forward = tokens * (width + 2 * model.hidden_size) * model.activation_bytes
    sampler = min(settings.max_num_seqs, tokens) * model.vocab_size * SAMPLER_BYTES_PER_LOGIT
    return max(forward, sampler)


def weight_bytes_per_gpu(model: ModelFacts, settings: ServeSettings) -> float:
    """The weights one GPU loads: the non-expert weights over TP (every DP rank holds its
    own copy) and a MoE model's routed experts over ``settings.moe_group`` GPUs, whole
    experts or slices of each alike in bytes. ``model`` is as served (``settings.served``)."""
    tp, group = settings.tensor_parallel_size, settings.moe_group(model)
    if group == tp:
        return model.weight_bytes / tp
    routed = model.routed_expert_parameters * WEIGHT_BYTES[model.dtype]
    return (model.weight_bytes - routed) / tp + routed / group


def plan_memory(
    model: ModelFacts, gpu: GpuProfile, settings: ServeSettings, *, check_context: bool = True
) -> MemoryPlan:
    """The KV cache vLLM would allocate; raises ``StartRefusal`` where vLLM refuses.
    ``check_context=False`` leaves out the last check (one ``max_model_len`` sequence must
    fit the cache), for a capacity table that holds for any context length."""
    model = settings.served(model)
    tp = settings.tensor_parallel_size
    total = gpu.memory_bytes
    budget = settings.gpu_memory_utilization * total
    weights = weight_bytes_per_gpu(model, settings)
    if weights > budget:
        raise StartRefusal(
            f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{weights / GIB:.2f} GiB for the weights. GPU 0 has a total capacity of "
            f"{total / GIB:.2f} GiB, of which gpu_memory_utilization="
            f"{settings.gpu_memory_utilization} allows {budget / GIB:.2f} GiB.",
            summary="the weights do not fit",
        )
    # NCCL's buffers: a TP group's, or the expert group's of a MoE model over DP ranks.
    communicates = tp > 1 or settings.moe_group(model) > 1
    non_torch = NON_TORCH_BYTES + (NON_TORCH_TP_BYTES if communicates else 0.0)
    reserve = profile_peak_bytes(model, settings) + non_torch
    kv = budget - weights - reserve
    if kv <= 0:
        raise StartRefusal(
            "ValueError: No available memory for the cache blocks. Try increasing "
            "`gpu_memory_utilization` when initializing the engine.",
            summary="no memory is left for the KV cache",
        )
    # Per GPU per token of a sequence: with DCP each GPU of a DCP group stores every DCP-th
    # token (PR #23734: "kvcache token budget always increased by dcp times").
    dcp = settings.decode_context_parallel_size
    per_gpu_token = model.kv_bytes_per_token(settings.kv_cache_dtype, tp)
    block = settings.block_size
    # A rank's blocks of block_size tokens: each GPU's pages, times DCP (vLLM scales the
    # scheduler's block to block_size x DCP tokens over the same pages).
    num_blocks = int(kv // (per_gpu_token * block)) * dcp
    plan = MemoryPlan(budget, weights, reserve, kv, per_gpu_token / dcp, num_blocks, block)
    # vLLM's check (v1/core/kv_cache_utils.py, check_enough_kv_cache_memory): one request of
    # max_model_len tokens, in whole blocks, must fit; its estimate is the longest that does.
    # With DCP a GPU holds cdiv(max_model_len, dcp) of them (kv_cache_interface.py,
    # max_memory_usage_bytes).
    local_len = -(-settings.max_model_len // dcp)
    needed = -(-local_len // block) * block * per_gpu_token
    if check_context and needed > kv:
        estimated = int(kv // (per_gpu_token * block)) * block * dcp
        raise StartRefusal(
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({settings.max_model_len}), ({needed / GIB:.2f} GiB KV cache is needed, which "
            f"is larger than the available KV cache memory ({kv / GIB:.2f} GiB). Based on "
            f"the available memory, the estimated maximum model length is {estimated}. Try "
            "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
            "initializing the engine.",
            summary=f"the KV cache cannot hold one {settings.max_model_len:,}-token sequence",
        )
    return plan


def start_check(
    model: ModelFacts, gpu: GpuProfile, flags: Mapping[str, object]
) -> tuple[ServeSettings, MemoryPlan]:
    """The settings vLLM would run with and its memory plan; raises ``StartRefusal`` where
    vLLM (and so the simulator) refuses to start."""
    settings = ServeSettings.from_flags(flags, model, gpu)
    return settings, plan_memory(model, gpu, settings)
