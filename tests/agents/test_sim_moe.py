"""The simulator's mixture-of-experts and MLA models (issue 18: a frontier MoE model on the
newest GPU). Offline, in simulated time. Expected figures are worked out here from the
models' published config.json (the same embedded configs ``test_hf_configs`` checks against
their authors' totals), not read back from the simulator."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from agents.engines.sim import SimRequest, closed_loop
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import (
    DEFAULT_EFFICIENCY,
    GIB,
    MODEL_PRESETS,
    Efficiency,
    ModelFacts,
    StartRefusal,
    StepCost,
    StepModel,
    gpu_profile,
    start_check,
)
from agents.hardware.models import WEIGHT_BYTES
from tests.agents.test_hf_configs import DEEPSEEK_V3, MIXTRAL_8X7B

H100, H200, B300 = gpu_profile("H100"), gpu_profile("H200"), gpu_profile("B300")
MIXTRAL = ModelFacts.from_hf_config(MIXTRAL_8X7B, name="mixtral-8x7b")
DEEPSEEK = ModelFacts.from_hf_config(DEEPSEEK_V3, name="deepseek-v3")

# meta-llama/Llama-3.1-405B config.json (architecture keys): the largest dense GQA model of
# DeepSeek-V3's size class.
LLAMA_405B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16384,
    "intermediate_size": 53248,
    "max_position_embeddings": 131072,
    "num_attention_heads": 128,
    "num_hidden_layers": 126,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def dense_like(model: ModelFacts, parameters: float) -> ModelFacts:
    """A dense model of ``model``'s shape (layers, widths, heads) with ``parameters``."""
    return dataclasses.replace(
        model,
        name=f"dense-{parameters / 1e9:.1f}b",
        parameters=parameters,
        active_parameters=None,
        num_experts=0,
        num_experts_per_token=0,
        num_shared_experts=0,
        moe_intermediate_size=None,
        num_moe_layers=0,
    )


def step_model(model, gpu, flags, efficiency: Efficiency = DEFAULT_EFFICIENCY) -> StepModel:
    settings, plan = start_check(model, gpu, flags)
    return StepModel(model, gpu, settings, plan, efficiency)


# The constants that read as the step model did before attention and low-precision
# products had their own efficiencies and the per-layer floor existed.
AS_BEFORE = dataclasses.replace(
    DEFAULT_EFFICIENCY, attention_flops=DEFAULT_EFFICIENCY.flops, layer_overhead_s=0.0
)


def old_cost(steps: StepModel, batch, sampled) -> StepCost:
    """StepModel.cost as it was before MoE and MLA were modelled (commit 47c4d71), verbatim."""
    model, settings, eff = steps.model, steps.settings, steps.eff
    tp = settings.tensor_parallel_size
    embedding = model.vocab_size * model.hidden_size
    linear_params = max(model.parameters - 2 * embedding, 0.0)
    attn_unit = 4 * model.num_layers * model.num_attention_heads * model.head_dim
    flops_rate = steps.gpu.bf16_tflops * 1e12 * eff.flops * tp
    bytes_rate = steps.gpu.bandwidth_tbps * 1e12 * eff.bandwidth
    overhead = eff.step_overhead_s + (eff.eager_overhead_s if settings.enforce_eager else 0.0)
    tokens = 0
    attended = 0.0
    context = 0
    for new, before in batch:
        tokens += new
        attended += new * before + new * (new + 1) / 2
        context += before + new
    flops = 2 * linear_params * tokens + 2 * embedding * sampled + attn_unit * attended
    weight_bytes = model.weight_bytes / tp
    kv_bytes = context * steps.plan.kv_bytes_per_token
    act_bytes = tokens * model.hidden_size * model.activation_bytes * 8
    compute_s = flops / flops_rate
    memory_s = (weight_bytes + kv_bytes + act_bytes) / bytes_rate
    comm_s = 0.0
    if tp > 1:
        payload = tokens * model.hidden_size * model.activation_bytes
        per_reduce = eff.allreduce_latency_s + 2 * (tp - 1) / tp * payload / (
            steps.gpu.link_gbps * 1e9
        )
        comm_s = 2 * model.num_layers * per_reduce
    seconds = max(compute_s, memory_s) + comm_s + overhead + eff.per_sequence_s * len(batch)
    return StepCost(seconds, compute_s, memory_s, comm_s)


BATCHES = [
    ([(1, 0)], 1),
    ([(1, 511)], 1),
    ([(1, 1000)] * 64, 64),
    ([(512, 0)], 1),
    ([(2048, 4096), (1, 300), (1, 7000)], 3),
    ([(300, 100)] * 7 + [(1, 5)] * 100, 101),
]


@pytest.mark.parametrize(
    "preset, gpu, flags",
    [
        ("llama-3.1-8b", "H100", {}),
        ("llama-3.1-8b", "A100", {"enforce_eager": True, "kv_cache_dtype": "fp8"}),
        ("llama-3.1-70b", "H100", {"tensor_parallel_size": 4}),
        ("mistral-7b", "RTX 4090", {"max_model_len": 8192}),
        ("qwen2.5-7b", "L40S", {"max_model_len": 8192}),
        ("llama-2-13b", "H200", {"tensor_parallel_size": 2}),
    ],
)
def test_a_dense_models_step_costs_are_what_they_were(preset, gpu, flags):
    steps = step_model(MODEL_PRESETS[preset].facts, gpu_profile(gpu), flags, AS_BEFORE)
    for batch, sampled in BATCHES:
        now, before = steps.cost(batch, sampled), old_cost(steps, batch, sampled)
        # Equal but for rounding: the FLOPs are now summed per kind of product.
        assert dataclasses.astuple(now) == pytest.approx(dataclasses.astuple(before), rel=1e-12)


def test_mixtral_decodes_one_stream_like_its_active_size_not_its_total():
    def tpot(model):
        scheduler = make_scheduler(model, H100, {"tensor_parallel_size": 2, "max_model_len": 4096})
        result = closed_loop(
            scheduler, concurrency=1, total=2, make=lambda i: SimRequest(i, 512, 64)
        )
        return statistics.median(result.itls())

    moe = tpot(MIXTRAL)
    total = tpot(dense_like(MIXTRAL, MIXTRAL.parameters))
    active = tpot(dense_like(MIXTRAL, MIXTRAL.active_parameters))
    # One token reads its 2 of 8 experts: about 13 B of 47 B weights, memory-bound.
    assert moe < 0.5 * total
    assert moe == pytest.approx(active, rel=0.05)


def test_a_moe_step_reads_more_experts_as_the_batch_grows_up_to_all_of_them():
    tp = 2
    steps = step_model(MIXTRAL, H100, {"tensor_parallel_size": tp, "max_model_len": 4096})
    width = WEIGHT_BYTES[MIXTRAL.dtype]
    experts, k = MIXTRAL_8X7B["num_local_experts"], MIXTRAL_8X7B["num_experts_per_tok"]
    hidden, ffn = MIXTRAL_8X7B["hidden_size"], MIXTRAL_8X7B["intermediate_size"]
    layers = MIXTRAL_8X7B["num_hidden_layers"]
    expert_bytes = 3 * hidden * ffn * width / tp  # gate, up, down; every layer is MoE
    all_bytes = MIXTRAL.parameters * width / tp
    non_expert = all_bytes - layers * experts * expert_bytes

    def expected(tokens):
        touched = experts * (1 - (1 - k / experts) ** tokens)
        return non_expert + layers * touched * expert_bytes

    read = [steps.weight_bytes_read(tokens) for tokens in (1, 2, 4, 8, 16, 32)]
    assert read == sorted(set(read))  # strictly more with every doubling
    assert read[0] == pytest.approx(non_expert + layers * k * expert_bytes, rel=1e-12)
    assert read[0] == pytest.approx(MIXTRAL.active_parameters * width / tp, rel=1e-9)
    assert read[1] == pytest.approx(non_expert + layers * 3.5 * expert_bytes, rel=1e-12)
    for tokens in (3, 5, 64):
        assert steps.weight_bytes_read(tokens) == pytest.approx(expected(tokens), rel=1e-12)
    assert steps.weight_bytes_read(512) == pytest.approx(all_bytes, rel=1e-12)
    # The step's memory time follows: a bigger decode batch reads more weights.
    decode = [steps.cost([(1, 100)] * n, n).memory_s for n in (1, 2, 8, 64)]
    assert decode == sorted(set(decode))


def test_mla_caches_far_less_kv_per_token_than_a_gqa_model_of_its_size():
    llama = ModelFacts.from_hf_config(LLAMA_405B, name="llama-3.1-405b")
    # MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer, bf16.
    mla = (
        DEEPSEEK_V3["num_hidden_layers"]
        * (DEEPSEEK_V3["kv_lora_rank"] + DEEPSEEK_V3["qk_rope_head_dim"])
        * 2
    )
    head_dim = LLAMA_405B["hidden_size"] // LLAMA_405B["num_attention_heads"]
    gqa = 2 * LLAMA_405B["num_hidden_layers"] * LLAMA_405B["num_key_value_heads"] * head_dim * 2
    assert (mla, gqa) == (70_272, 516_096)
    assert DEEPSEEK.kv_bytes_per_token() == mla
    assert llama.kv_bytes_per_token() == gqa
    assert mla < gqa / 7


def test_an_mla_step_reads_the_latent_cache_and_attends_over_it():
    steps = step_model(DEEPSEEK, H200, {"tensor_parallel_size": 8})
    layers, heads = DEEPSEEK_V3["num_hidden_layers"], DEEPSEEK_V3["num_attention_heads"]
    rank, rope = DEEPSEEK_V3["kv_lora_rank"], DEEPSEEK_V3["qk_rope_head_dim"]
    # The whole latent on each of the 8 GPUs: the plan's figure does not shrink with TP.
    assert steps.plan.kv_bytes_per_token == layers * (rank + rope) * 2
    near, far = steps.cost([(1, 1_000)], 1), steps.cost([(1, 101_000)], 1)
    bytes_rate = H200.bandwidth_tbps * 1e12 * DEFAULT_EFFICIENCY.bandwidth
    kv_read = (far.memory_s - near.memory_s) * bytes_rate
    assert kv_read == pytest.approx(100_000 * steps.plan.kv_bytes_per_token, rel=1e-9)
    # Decode attends in the absorbed form: QK^T over rank + rope, AV over rank, per head.
    flops_rate = H200.bf16_tflops * 1e12 * DEFAULT_EFFICIENCY.attention_flops * 8
    attention = (far.compute_s - near.compute_s) * flops_rate
    per_pair = layers * heads * (2 * (rank + rope) + 2 * rank)
    assert attention == pytest.approx(100_000 * per_pair, rel=1e-9)


@pytest.mark.parametrize(
    "gpu, dtype, starts",
    [
        ("H100", "fp8", False),
        ("H200", "fp8", True),
        ("H200", "bfloat16", False),
        ("B300", "bfloat16", True),
    ],
)
def test_deepseek_v3_starts_on_eight_gpus_only_where_its_weights_fit(gpu, dtype, starts):
    hardware = gpu_profile(gpu)
    model = dataclasses.replace(DEEPSEEK, dtype=dtype)
    # The expectation from the datasheet and the checkpoint: 671 B weights over 8 GPUs
    # against vLLM's default 90 % of each GPU's memory.
    per_gpu = DEEPSEEK.parameters * WEIGHT_BYTES[dtype] / 8
    assert (per_gpu < 0.9 * hardware.memory_gib * GIB) is starts
    flags = {"tensor_parallel_size": 8}
    if starts:
        _, plan = start_check(model, hardware, flags)
        assert plan.kv_tokens > DEEPSEEK.max_position_embeddings
    else:
        with pytest.raises(StartRefusal) as refusal:
            start_check(model, hardware, flags)
        assert refusal.value.summary == "the weights do not fit"


def test_it_refuses_heads_that_do_not_divide_over_the_gpus_as_vllm_does():
    with pytest.raises(StartRefusal, match=r"attention heads \(128\) must be divisible"):
        start_check(DEEPSEEK, H200, {"tensor_parallel_size": 6})
    with pytest.raises(StartRefusal, match=r"attention heads \(32\) must be divisible"):
        start_check(MIXTRAL, H100, {"tensor_parallel_size": 3})
    # 40 query heads divide over 5 GPUs, but 8 KV heads neither split nor replicate evenly.
    odd = dataclasses.replace(MODEL_PRESETS["llama-2-13b"].facts, num_kv_heads=8)
    with pytest.raises(StartRefusal, match="8 is not divisible by 5") as refusal:
        start_check(odd, H100, {"tensor_parallel_size": 5})
    assert "KV heads" in refusal.value.summary
    # Mixtral's 8 KV heads replicate over 16 GPUs (two each); MLA has no KV heads to split.
    start_check(MIXTRAL, H100, {"tensor_parallel_size": 16, "max_model_len": 4096})
    start_check(DEEPSEEK, H200, {"tensor_parallel_size": 16})


@pytest.mark.parametrize(
    "model, gpu, flags",
    [
        (MIXTRAL, H100, {"tensor_parallel_size": 2, "max_model_len": 8192}),
        (DEEPSEEK, H200, {"tensor_parallel_size": 8, "max_model_len": 8192}),
    ],
    ids=["mixtral-2xH100", "deepseek-v3-fp8-8xH200"],
)
def test_the_scheduler_serves_moe_models_end_to_end(model, gpu, flags):
    def level(concurrency):
        scheduler = make_scheduler(model, gpu, flags)
        result = closed_loop(
            scheduler,
            concurrency=concurrency,
            total=3 * concurrency,
            make=lambda i: SimRequest(i, 1024, 128),
        )
        assert len(result.requests) == 3 * concurrency
        assert all(len(r.token_times) == 128 for r in result.requests)
        return result

    results = {c: level(c) for c in (1, 16, 64)}
    throughput = {c: r.output_throughput for c, r in results.items()}
    assert throughput[1] < throughput[16] < throughput[64]
    itl = {c: statistics.median(r.itls()) for c, r in results.items()}
    # A bigger batch touches more experts each step, so each step takes longer.
    assert itl[1] < itl[16] < itl[64]
    # The same arrivals give the same token times.
    again = level(16)
    assert [r.token_times for r in again.requests] == [r.token_times for r in results[16].requests]
