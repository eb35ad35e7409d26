"""Precision-aware speed (issue 33): weights, activations and the KV cache at their stored
precision, the linear layers at the GPU's tensor peak for it, as vLLM 0.11 picks its kernels
(``agents/hardware/precision.py``)."""

from __future__ import annotations

import dataclasses

import pytest

from agents.hardware import (
    DEFAULT_EFFICIENCY,
    MODEL_PRESETS,
    StartRefusal,
    StepModel,
    gpu_profile,
    start_check,
)
from agents.hardware.precision import served_precision
from agents.loadgen import BenchConfig, RandomPrompts
from agents.predict import predict_trial

LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"].facts
H100, A100, B200 = gpu_profile("H100"), gpu_profile("A100"), gpu_profile("B200")


def steps(gpu, flags, model=LLAMA_8B) -> StepModel:
    settings, plan = start_check(model, gpu, {"max_model_len": 8192, **flags})
    return StepModel(model, gpu, settings, plan)


def busy(flags: dict) -> dict:
    """Llama 3.1 8B on an H100 at 64 users, 512 tokens in and 128 out, predicted."""
    config = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=RandomPrompts(input_len=512, output_len=128),
        levels=({"concurrency": 64},),
        num_prompts=192,
        metrics_url=None,
    )
    prediction = predict_trial(LLAMA_8B, H100, {"max_model_len": 8192, **flags}, config)
    (level,) = prediction.levels
    return level


def test_it_predicts_more_throughput_and_a_shorter_tpot_with_fp8_on_an_h100():
    bf16, fp8 = busy({}), busy({"quantization": "fp8"})
    assert fp8["output_throughput"] > 1.05 * bf16["output_throughput"]
    assert fp8["median_tpot_ms"] < 0.95 * bf16["median_tpot_ms"]
    assert fp8["median_ttft_ms"] < bf16["median_ttft_ms"]


def test_fp8_on_a_hopper_multiplies_at_twice_the_bf16_peak():
    assert H100.tensor_tflops("fp8") == pytest.approx(2 * H100.tensor_tflops("bf16"), rel=0.01)
    prefill = [(8192, 0)]
    bf16 = steps(H100, {}).cost(prefill, 1)
    fp8 = steps(H100, {"quantization": "fp8"}).cost(prefill, 1)
    # Only the linear layers' products move to the FP8 peak (at the share of it FP8 GEMMs
    # reach); attention and the LM head stay 16 bit.
    eff = DEFAULT_EFFICIENCY
    embedding = LLAMA_8B.vocab_size * LLAMA_8B.hidden_size
    linear_flops = 2 * (LLAMA_8B.parameters - 2 * embedding) * 8192
    saved = linear_flops / (H100.tensor_tflops("bf16") * 1e12 * eff.flops) - linear_flops / (
        H100.tensor_tflops("fp8") * 1e12 * eff.low_precision_flops
    )
    assert saved > 0
    assert fp8.compute_s == pytest.approx(bf16.compute_s - saved, rel=1e-9)


def test_fp8_on_an_a100_is_weight_only_less_memory_no_faster_products():
    """Ampere has no FP8 tensor cores: vLLM runs FP8 weights through Marlin (``use_marlin``
    below compute capability 8.9), so activations stay 16 bit."""
    assert served_precision("bfloat16", A100, "fp8").compute == "bf16"
    bf16, fp8 = steps(A100, {}), steps(A100, {"quantization": "fp8"})
    assert fp8.cost([(8192, 0)], 1).compute_s == bf16.cost([(8192, 0)], 1).compute_s
    decode = [(1, 1024)] * 8
    assert fp8.cost(decode, 8).memory_s < 0.65 * bf16.cost(decode, 8).memory_s


def test_a_weight_only_int4_checkpoint_speeds_decode_not_prefill():
    awq = dataclasses.replace(LLAMA_8B, dtype="awq")
    bf16, int4 = steps(H100, {}), steps(H100, {}, model=awq)
    assert int4.precision.compute == "bf16"
    assert int4.cost([(8192, 0)], 1).compute_s == bf16.cost([(8192, 0)], 1).compute_s
    assert int4.cost([(1, 1024)], 1).seconds < 0.7 * bf16.cost([(1, 1024)], 1).seconds


def test_nvfp4_multiplies_in_fp4_on_blackwell_only():
    assert served_precision("nvfp4", B200).compute == "fp4"
    assert B200.tensor_tflops("fp4") == 2 * B200.tensor_tflops("fp8")
    assert served_precision("nvfp4", H100).compute == "bf16"  # Marlin FP4, weight-only
    assert served_precision("mxfp4", B200).compute == "bf16"  # FlashInfer MXFP4 x BF16


def test_an_fp8_kv_cache_holds_twice_the_tokens_and_reads_half_the_bytes():
    _, auto = start_check(LLAMA_8B, H100, {"max_model_len": 8192})
    _, fp8 = start_check(LLAMA_8B, H100, {"max_model_len": 8192, "kv_cache_dtype": "fp8"})
    assert fp8.kv_tokens == pytest.approx(2 * auto.kv_tokens, rel=0.01)
    # Sequences of the full context that fit at once: twice as many.
    assert fp8.kv_tokens // 8192 >= 2 * (auto.kv_tokens // 8192) - 1
    long_decode = [(1, 8000)] * 32
    assert (
        steps(H100, {"kv_cache_dtype": "fp8"}).cost(long_decode, 32).memory_s
        < 0.85 * steps(H100, {}).cost(long_decode, 32).memory_s
    )


def test_fp8_weights_keep_the_embeddings_in_16_bit_and_leave_more_for_the_kv_cache():
    fp8 = dataclasses.replace(LLAMA_8B, dtype="fp8")
    tables = 2 * LLAMA_8B.vocab_size * LLAMA_8B.hidden_size
    assert fp8.weight_bytes == LLAMA_8B.parameters + tables
    _, bf16_plan = start_check(LLAMA_8B, H100, {"max_model_len": 8192})
    _, fp8_plan = start_check(LLAMA_8B, H100, {"max_model_len": 8192, "quantization": "fp8"})
    assert fp8_plan.weight_bytes == fp8.weight_bytes
    assert fp8_plan.kv_tokens > bf16_plan.kv_tokens


@pytest.mark.parametrize(
    ("dtype", "quantization", "message"),
    [
        ("bfloat16", "awq", "needs a checkpoint quantized with it"),
        ("awq", "fp8", "does not match the quantization method"),
        ("fp8", "mxfp4", "does not match the quantization method"),
        ("bfloat16", "gguf", "GGUF"),
    ],
)
def test_it_refuses_a_quantization_flag_the_checkpoint_does_not_carry(dtype, quantization, message):
    model = dataclasses.replace(LLAMA_8B, dtype=dtype)
    with pytest.raises(StartRefusal, match=message):
        start_check(model, H100, {"max_model_len": 8192, "quantization": quantization})


def test_a_checkpoint_read_with_its_own_method_keeps_its_width():
    gptq = dataclasses.replace(LLAMA_8B, dtype="gptq")
    settings, plan = start_check(gptq, H100, {"max_model_len": 8192, "quantization": "gptq_marlin"})
    assert settings.served(gptq).dtype == "gptq" and plan.weight_bytes == gptq.weight_bytes
