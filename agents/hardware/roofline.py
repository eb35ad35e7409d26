"""Step time: the roofline every Benchsite time figure rests on (the simulator's steps and
the site's pre-run estimate).

Guarantees:

- ``StepModel.cost`` is max(FLOPs / achievable FLOP/s, bytes / achievable bandwidth) per
  GPU (the linear layers at the weights' tensor precision, ``agents.hardware.precision``),
  plus a fixed per-step overhead and, with tensor parallelism, two all-reduces per layer.
  FLOPs count the linear layers for every scheduled token, attention over each token's
  context, and the LM head for each sampled token; bytes count the weights the step reads
  (``weight_bytes_read``, at their served width) plus each request's KV cache read and the
  new KV written; the host's ``per_sequence_s`` is added for each request in the step.
- A dense model's figures are exactly what they were before mixture-of-experts and MLA were
  modelled. A MoE model computes with its *active* weights per token and reads its non-expert
  weights plus the routed experts the step's tokens are expected to touch (uniform routing);
  an MLA model attends over its cached latent (``_AttentionCost`` says how).
- Parallelism as vLLM runs it (``agents.hardware.memory`` names the sources): a step is one
  data-parallel rank's batch; a MoE model's routed experts run over TP x DP GPUs on the
  tokens of every rank (``cost``'s ``moe_tokens``), as whole experts with expert
  parallelism (so the narrow-slice penalty does not apply) or 1/(TP x DP) slices without;
  with DP > 1 each MoE layer dispatches and combines its tokens across those GPUs (vLLM's
  default all-to-all backend, all-gather + reduce-scatter) in place of the MLP's all-reduce.
  Decode context parallelism reads 1/DCP of each context's KV per GPU and adds three
  collectives per layer over the DCP group (vLLM's ``ag_rs``: all-gather Q, all-gather the
  partial outputs and their log-sum-exp, reduce-scatter).
- Speculative decoding (``agents.hardware.speculative``): a decode step verifies k + 1
  tokens per sequence, costed as a chunk of k + 1 (attended in MLA's decode form), plus,
  for EAGLE and MTP, k passes of a one-layer draft, each reading an average layer's weights
  and the LM head on every GPU (memory-bound).
- Pure arithmetic: the same inputs always give the same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.hardware.gpus import GpuProfile
from agents.hardware.memory import MemoryPlan, ServeSettings
from agents.hardware.models import WEIGHT_BYTES, ModelFacts
from agents.hardware.precision import served_precision


@dataclass(frozen=True)
class Efficiency:
    """What fraction of the datasheet peaks a real step reaches, and fixed costs.

    Defaults are set from the calibration rows in docs/simulator.md (never from the
    held-out ones): prefill reaches about 65 % of peak FLOP/s, decode reads memory at about
    85 % of peak; the host's cost per request in a step and the all-reduce latency are what
    the batched and tensor-parallel rows missed without them, the server's front end what
    single requests' TTFT missed. FP8/FP4 products are as ``benchmarks/sim_fit.py`` fitted
    them (2026-12-07), MoE experts' slices as a grid refit them on the MoE calibration rows
    (2026-12-08); the fit's other constants are recorded in
    ``benchmarks.sim_calibration.FITTED_CONSTANTS``, not adopted (docs/simulator.md says why).
    """

    flops: float = 0.65  # 16-bit linear layers' products
    # Attention's products (FlashAttention kernels) and FP8/FP4 linear products (against
    # their own peak): their kernels reach other shares of the datasheet than BF16 GEMMs.
    attention_flops: float = 0.65
    low_precision_flops: float = 0.46
    # Routed experts' grouped GEMMs: each GPU multiplies by its slice of every expert (the
    # intermediate width over TP), and a slice narrower than this many columns takes as
    # long as one this wide — small per-expert matrices leave the tensor cores idle.
    expert_min_width: float = 1800.0
    bandwidth: float = 0.85
    # Each layer's kernels take at least this long per step, whatever the batch: the floor
    # of a small batch's decode that bandwidth alone does not explain.
    layer_overhead_s: float = 0.0
    step_overhead_s: float = 0.0010  # scheduling, sampling, detokenizing: CUDA graphs on
    eager_overhead_s: float = 0.0040  # extra per step with --enforce-eager
    allreduce_latency_s: float = 25e-6
    # CPU-side cost per request in the step (input preparation, sampling, detokenizing,
    # streaming its output): the part of a step that grows with the batch on the host.
    per_sequence_s: float = 0.0002
    # The server's own time per request outside the engine's steps: HTTP handling, chat
    # template and tokenization before the engine core sees it, and its first token's way
    # back out. What TTFT shows at low load beyond the prefill step.
    request_overhead_s: float = 0.010

    @classmethod
    def from_constants(cls, constants: Mapping[str, float]) -> Efficiency:
        """The constants a calibration recorded (``dataclasses.asdict`` of one), read by
        this version: one it does not know is left out, one it lacks keeps its default."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{name: float(v) for name, v in constants.items() if name in known})


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
        # The model as served: its weights at the width the quantization flags store them at.
        model = settings.served(model)
        self.model = model
        self.gpu = gpu
        self.settings = settings
        self.plan = plan
        self.eff = efficiency
        self.precision = served_precision(model.dtype, gpu)
        tp = settings.tensor_parallel_size
        # The GPUs the routed experts run on (TP x DP for a MoE model over DP ranks).
        group = settings.moe_group(model)
        self._moe_group = group
        embedding = model.vocab_size * model.hidden_size
        # FLOPs follow the weights one token runs through: all of a dense model's, the
        # active ones of a MoE model (its router picks k experts per token).
        self._linear_params = max(_parameters_per_token(model) - 2 * embedding, 0.0)
        self._head_params = embedding
        self._attention = _AttentionCost.of(model)
        # FLOP/s per kind of product, all GPUs of the tensor-parallel group together. The
        # linear layers multiply at the weights' tensor precision (FP8 on Hopper: twice the
        # BF16 peak; BF16 for 16-bit and weight-only quantized weights); attention and the
        # LM head stay 16 bit.
        bf16_rate = gpu.bf16_tflops * 1e12 * tp
        linear_tflops = gpu.tensor_tflops(self.precision.compute)
        if self.precision.compute == "bf16" or not linear_tflops:
            linear_rate = bf16_rate * efficiency.flops
        else:
            linear_rate = linear_tflops * 1e12 * tp * efficiency.low_precision_flops
        self._head_rate = bf16_rate * efficiency.flops
        self._attention_rate = bf16_rate * efficiency.attention_flops
        self._linear_rate = linear_rate
        # Each GPU multiplies by whole experts with expert parallelism, else by its slice of
        # every expert; the experts' FLOP/s are the whole expert group's.
        width = model.moe_intermediate_size or 0
        slice_width = width if settings.expert_parallel(model) else width / group
        narrow = max(1.0, efficiency.expert_min_width / slice_width) if slice_width else 1.0
        self._expert_rate = linear_rate * (group // tp) / narrow
        # Of the weights a token runs through, the routed experts' (k of E per MoE layer).
        self._routed_params = (
            model.routed_expert_parameters * model.num_experts_per_token / model.num_experts
            if model.num_experts
            else 0.0
        )
        self._dense_params = max(self._linear_params - self._routed_params, 0.0)
        self._layer_floor_s = efficiency.layer_overhead_s * model.num_layers
        spec = settings.speculative
        # Queries this wide per sequence are decodes (k + 1 with speculative decoding).
        self._decode_width = 1 + (spec.tokens if spec else 0)
        self._bytes_rate = gpu.bandwidth_tbps * 1e12 * efficiency.bandwidth
        self._overhead = efficiency.step_overhead_s + (
            efficiency.eager_overhead_s if settings.enforce_eager else 0.0
        )
        if spec and spec.draft_passes:
            # One draft layer (an average layer's weights per GPU) and the LM head per pass.
            layer = plan.weight_bytes / model.num_layers
            head = model.vocab_size * model.hidden_size * model.activation_bytes / tp
            self._overhead += (
                spec.draft_passes
                * (layer + head)
                / (gpu.bandwidth_tbps * 1e12 * efficiency.bandwidth)
            )
        width = WEIGHT_BYTES[model.dtype]
        # Per GPU, in expectation: tensor parallelism shards every expert (its intermediate
        # dimension) over the expert group, so each GPU reads 1/group of every touched
        # expert; expert parallelism gives each GPU E/group whole experts, of which the same
        # share is touched under uniform routing. The bytes agree; the products do not.
        self._expert_bytes = 3 * model.hidden_size * (model.moe_intermediate_size or 0) * width
        self._expert_bytes /= group
        routed = model.routed_expert_parameters * width
        self._non_expert_bytes = (model.weight_bytes - routed) / tp

    def weight_bytes_read(self, tokens: int) -> float:
        """The weight bytes one GPU reads in a step that computes ``tokens`` tokens.

        Dense: every weight, once (each GPU its 1/tp). MoE: the non-expert weights (embedding,
        attention, norms, routers, dense layers, shared experts) plus, in each MoE layer, the
        routed experts the step touches. With uniform routing each token picks k of E experts,
        so an expert is missed by all T tokens with probability (1 - k/E)^T and the expected
        number touched is E·(1 - (1 - k/E)^T): k at T = 1, all E as T grows."""
        model = self.model
        if not model.num_experts:
            return model.weight_bytes / self.settings.tensor_parallel_size
        experts = model.num_experts
        missed = (1 - model.num_experts_per_token / experts) ** max(tokens, 0)
        touched = experts * (1 - missed)
        return self._non_expert_bytes + model.num_moe_layers * touched * self._expert_bytes

    def cost(
        self, batch: Sequence[tuple[int, int]], sampled: int, moe_tokens: int | None = None
    ) -> StepCost:
        """``batch``: (tokens computed this step, tokens already in the request's KV);
        ``sampled``: how many requests sample a token at the end of the step;
        ``moe_tokens``: the tokens every data-parallel rank routes through the MoE layers in
        this step (None: this batch's, as with one rank)."""
        tokens = 0
        attended = 0.0
        context = 0
        prefill_attended = 0.0
        prefill_context = 0
        for new, before in batch:
            tokens += new
            context += before + new
            # Each new token attends to everything before it and to itself.
            pairs = new * before + new * (new + 1) / 2
            if new > self._decode_width and self._attention.latent:
                prefill_attended += pairs
                prefill_context += before
            else:
                attended += pairs
        attention_flops = self._attention.decode_unit * attended
        if prefill_attended:
            attention_flops += (
                self._attention.prefill_unit * prefill_attended
                + self._attention.expand_unit * prefill_context
            )
        routed_tokens = tokens if moe_tokens is None else moe_tokens
        compute_s = (
            2 * self._dense_params * tokens / self._linear_rate
            + 2 * self._routed_params * routed_tokens / self._expert_rate
            + 2 * self._head_params * sampled / self._head_rate
            + attention_flops / self._attention_rate
        )
        weight_bytes = self.weight_bytes_read(routed_tokens)
        # Per GPU: the plan's figure is MLA's whole latent on every GPU, GQA's share of heads,
        # either over DCP.
        kv_bytes = context * self.plan.kv_bytes_per_token
        act_bytes = tokens * self.model.hidden_size * self.model.activation_bytes * 8
        memory_s = (weight_bytes + kv_bytes + act_bytes) / self._bytes_rate
        comm_s = self._communication_s(tokens, routed_tokens)
        seconds = (
            max(compute_s, memory_s, self._layer_floor_s)
            + comm_s
            + self._overhead
            + self.eff.per_sequence_s * len(batch)
        )
        return StepCost(seconds, compute_s, memory_s, comm_s)

    def _communication_s(self, tokens: int, routed_tokens: int) -> float:
        """Per step: TP's all-reduces (two per layer: attention's output and the MLP's); with
        DP > 1 a MoE layer's MLP all-reduce becomes a dispatch and a combine over the expert
        group; with DCP > 1 three collectives per layer over the DCP group. Each collective
        costs ``allreduce_latency_s`` plus its bytes over ``link_gbps``."""
        model, eff, tp = self.model, self.eff, self.settings.tensor_parallel_size
        link = self.gpu.link_gbps * 1e9
        hidden_bytes = model.hidden_size * model.activation_bytes
        comm_s = 0.0
        all_to_all = self._moe_group > tp
        if tp > 1:
            payload = tokens * hidden_bytes
            per_reduce = eff.allreduce_latency_s + 2 * (tp - 1) / tp * payload / link
            reduces = 2 * model.num_layers - (model.num_moe_layers if all_to_all else 0)
            comm_s = reduces * per_reduce
        if all_to_all:
            # vLLM's default all2all backend (allgather_reducescatter): every GPU of the group
            # gathers all ranks' tokens before the experts and reduce-scatters after.
            group = self._moe_group
            per_move = eff.allreduce_latency_s + (group - 1) / group * routed_tokens * (
                hidden_bytes / link
            )
            comm_s += 2 * model.num_moe_layers * per_move
        dcp = self.settings.decode_context_parallel_size
        if dcp > 1:
            # Each GPU's query heads gathered over the group, its partial outputs (and their
            # log-sum-exp) gathered and reduce-scattered back: the heads' width each time.
            head_width = (
                model.kv_lora_rank + model.qk_rope_head_dim
                if model.kv_lora_rank
                else model.head_dim
            )
            heads = model.num_attention_heads * dcp / tp
            payload = tokens * heads * head_width * model.activation_bytes
            per_move = eff.allreduce_latency_s + (dcp - 1) / dcp * payload / link
            comm_s += 3 * model.num_layers * per_move
        return comm_s


def _parameters_per_token(model: ModelFacts) -> float:
    """The weights one token runs through; for a MoE model stated without its active count,
    the total less the routed experts a token skips."""
    if not model.num_experts or model.active_parameters is not None:
        return model.parameters_per_token
    skipped = 1 - model.num_experts_per_token / model.num_experts
    return model.parameters - skipped * model.routed_expert_parameters


@dataclass(frozen=True)
class _AttentionCost:
    """Attention FLOPs per (new token, context token) pair, all layers and heads.

    Standard attention: QK^T and AV over ``head_dim`` per head, 4 × layers × heads × head dim.

    Multi-head latent attention (``kv_lora_rank`` > 0), as vLLM runs it:

    - decode (one new token): the absorbed form; each head's query meets the cached latent
      directly, QK^T over ``kv_lora_rank + qk_rope_head_dim`` and AV over ``kv_lora_rank``:
      layers × heads × (2 (rank + rope) + 2 rank);
    - prefill chunks: the latent is expanded to per-head K and V (``kv_b_proj``) and attended
      as ordinary attention with K of ``head_dim`` (nope + rope) and V of ``head_dim - rope``:
      layers × heads × (2 head dim + 2 (head dim - rope)), plus expanding the context cached
      before the chunk, 2 × rank × heads × (nope + v) per layer per context token.

    Assumed: V's head width equals the no-rope part of the query/key head
    (``v_head_dim == qk_nope_head_dim``, 128 in DeepSeek-V2/V3 and Kimi K2); ModelFacts does
    not carry ``v_head_dim``.
    """

    latent: bool
    decode_unit: float
    prefill_unit: float
    expand_unit: float

    @classmethod
    def of(cls, model: ModelFacts) -> _AttentionCost:
        layer_heads = model.num_layers * model.num_attention_heads
        rank, rope = model.kv_lora_rank, model.qk_rope_head_dim
        if not rank:
            unit = 4 * layer_heads * model.head_dim
            return cls(latent=False, decode_unit=unit, prefill_unit=unit, expand_unit=0.0)
        nope = v = model.head_dim - rope
        return cls(
            latent=True,
            decode_unit=layer_heads * (2 * (rank + rope) + 2 * rank),
            prefill_unit=layer_heads * (2 * model.head_dim + 2 * v),
            expand_unit=layer_heads * 2 * rank * (nope + v),
        )
