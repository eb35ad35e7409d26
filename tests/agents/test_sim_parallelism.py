"""Data, expert and decode-context parallelism in the start check and the simulator (issue
34), as vLLM runs them (``agents/hardware/memory.py`` names the sources). Offline, in
simulated time; expected figures are worked out here from the models' configs, not read
back from the simulator."""

from __future__ import annotations

import pytest

from agents.engines.sim import SimRequest, closed_loop
from agents.engines.sim.command import argument_parser, build_scheduler
from agents.engines.sim.scheduler import DataParallelScheduler, make_scheduler
from agents.hardware import (
    DEFAULT_EFFICIENCY,
    MODEL_PRESETS,
    ModelFacts,
    StartRefusal,
    StepModel,
    gpu_profile,
    start_check,
)
from agents.hardware.models import WEIGHT_BYTES
from tests.agents.test_hf_configs import DEEPSEEK_V3

H100, H200 = gpu_profile("H100"), gpu_profile("H200")
LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"].facts
DEEPSEEK = ModelFacts.from_hf_config(DEEPSEEK_V3, name="deepseek-v3")


def step_model(model, gpu, flags) -> StepModel:
    settings, plan = start_check(model, gpu, flags)
    return StepModel(model, gpu, settings, plan, DEFAULT_EFFICIENCY)


def test_data_parallel_ranks_each_hold_the_weights_and_a_kv_cache_of_their_own():
    one, plan_one = start_check(LLAMA_8B, H100, {"max_model_len": 8192})
    two, plan_two = start_check(LLAMA_8B, H100, {"max_model_len": 8192, "data_parallel_size": 2})
    # A dense model's replicas share nothing: the same plan per rank, twice the GPUs.
    assert (plan_two.weight_bytes, plan_two.num_blocks) == (
        plan_one.weight_bytes,
        plan_one.num_blocks,
    )
    assert (one.gpu_count, two.gpu_count) == (1, 2)


def test_data_parallel_ranks_share_the_load_and_double_a_saturated_servers_throughput():
    flags = {"max_model_len": 4096, "max_num_seqs": 8}

    def run(data_parallel: int):
        scheduler = make_scheduler(LLAMA_8B, H100, {**flags, "data_parallel_size": data_parallel})
        result = closed_loop(
            scheduler, concurrency=16, total=64, make=lambda i: SimRequest(i, 256, 64)
        )
        return scheduler, result

    single, alone = run(1)
    pair, together = run(2)
    assert isinstance(pair, DataParallelScheduler) and len(pair.ranks) == 2
    # max_num_seqs is per rank (docs/serving/data_parallel_deployment.md): 8 run on one
    # rank, 16 on two, and the lowest 4 x waiting + running rank took each new request.
    assert (alone.max_running, together.max_running) == (8, 16)
    assert [rank.generation_tokens for rank in pair.ranks] == [32 * 64, 32 * 64]
    assert together.output_throughput > 1.8 * alone.output_throughput
    assert pair.generation_tokens == single.generation_tokens == 64 * 64


def test_expert_parallel_spreads_whole_experts_over_tensor_times_data_parallel_gpus():
    flags = {"max_model_len": 8192}
    _, tp8 = start_check(DEEPSEEK, H200, {**flags, "tensor_parallel_size": 8})
    _, ep8 = start_check(
        DEEPSEEK, H200, {**flags, "tensor_parallel_size": 8, "enable_expert_parallel": True}
    )
    _, dp8 = start_check(
        DEEPSEEK,
        H200,
        {**flags, "data_parallel_size": 8, "enable_expert_parallel": True},
    )
    width = WEIGHT_BYTES["fp8"]
    routed = 58 * 256 * 3 * 7168 * 2048 * width  # 58 MoE layers of 256 experts
    # TP8 with or without EP: 1/8 of everything per GPU, in bytes alike.
    assert ep8.weight_bytes == tp8.weight_bytes == DEEPSEEK.weight_bytes / 8
    # DP8 x TP1 with EP: every GPU holds all the non-expert weights and 32 whole experts.
    assert dp8.weight_bytes == pytest.approx(DEEPSEEK.weight_bytes - routed + routed / 8)
    # Each DP rank caches the whole latent of its own sequences on its one GPU.
    assert dp8.kv_bytes_per_token == 61 * (512 + 64) * 2


def test_expert_parallel_runs_whole_experts_at_full_width_and_dp_adds_all_to_alls():
    flags = {"max_model_len": 8192, "tensor_parallel_size": 8}
    sliced = step_model(DEEPSEEK, H200, flags)
    whole = step_model(DEEPSEEK, H200, {**flags, "enable_expert_parallel": True})
    prefill = [(4096, 0)]
    # 2,048-wide experts over 8 GPUs are 256-wide slices: the grouped GEMMs run at
    # 256 / expert_min_width of their rate. Whole experts do not pay that.
    assert whole.cost(prefill, 1).compute_s < sliced.cost(prefill, 1).compute_s
    assert whole.cost(prefill, 1).comm_s == sliced.cost(prefill, 1).comm_s  # DP 1: all-reduce
    dp = step_model(
        DEEPSEEK,
        H200,
        {"max_model_len": 8192, "data_parallel_size": 8, "enable_expert_parallel": True},
    )
    tokens, everyone = 64, 8 * 64
    link = H200.link_gbps * 1e9
    move = DEFAULT_EFFICIENCY.allreduce_latency_s + 7 / 8 * everyone * 7168 * 2 / link
    # TP1: no all-reduce; a dispatch and a combine per MoE layer over every rank's tokens.
    assert dp.cost([(1, 1000)] * tokens, tokens, everyone).comm_s == pytest.approx(2 * 58 * move)
    # The experts see every rank's tokens: more of them touched, more bytes read.
    alone = dp.cost([(1, 1000)] * tokens, tokens, tokens).memory_s
    assert dp.cost([(1, 1000)] * tokens, tokens, everyone).memory_s > alone


def test_a_dense_model_ignores_expert_parallel_as_vllm_does():
    flags = {"max_model_len": 8192, "tensor_parallel_size": 2}
    plain = step_model(LLAMA_8B, H100, flags)
    flagged = step_model(LLAMA_8B, H100, {**flags, "enable_expert_parallel": True})
    batch = [(1, 2000)] * 16
    assert flagged.cost(batch, 16) == plain.cost(batch, 16)
    assert flagged.plan == plain.plan


def test_decode_context_parallel_multiplies_a_ranks_kv_tokens_and_reads_a_share_per_gpu():
    flags = {"tensor_parallel_size": 8, "max_model_len": 163840}
    _, tp8 = start_check(DEEPSEEK, H200, flags)
    _, dcp8 = start_check(DEEPSEEK, H200, {**flags, "decode_context_parallel_size": 8})
    assert dcp8.kv_bytes == tp8.kv_bytes  # the same memory, the duplicated latent gone
    per_gpu_blocks = int(tp8.kv_bytes // (61 * 576 * 2 * 16))
    assert (tp8.num_blocks, dcp8.num_blocks) == (per_gpu_blocks, 8 * per_gpu_blocks)
    assert dcp8.kv_bytes_per_token == tp8.kv_bytes_per_token / 8
    plain = step_model(DEEPSEEK, H200, flags)
    split = step_model(DEEPSEEK, H200, {**flags, "decode_context_parallel_size": 8})
    decode = [(1, 100_000)] * 8
    assert split.cost(decode, 8).memory_s < plain.cost(decode, 8).memory_s
    # Three collectives per layer over the DCP group: more communication per step.
    assert split.cost(decode, 8).comm_s > plain.cost(decode, 8).comm_s


def test_a_context_beyond_one_gpus_cache_starts_once_decode_context_parallel_splits_it():
    # 4M tokens of DeepSeek's latent (70,272 bytes each) is 262 GiB: more than an H200 holds
    # after 1/8 of the weights, but an eighth of it per GPU fits.
    model = ModelFacts.from_hf_config(
        {**DEEPSEEK_V3, "max_position_embeddings": 4 * 1024 * 1024}, name="deepseek-4m"
    )
    flags = {"tensor_parallel_size": 8, "max_model_len": 4 * 1024 * 1024}
    with pytest.raises(StartRefusal, match="estimated maximum model length"):
        start_check(model, H200, flags)
    _, plan = start_check(model, H200, {**flags, "decode_context_parallel_size": 8})
    assert plan.kv_tokens >= 4 * 1024 * 1024


def test_serve_sim_takes_the_parallelism_flags():
    args = argument_parser().parse_args(
        ["llama-3.1-8b", "--gpu", "H100", "--max-model-len", "4096", "--data-parallel-size", "2",
         "--tensor-parallel-size", "2", "--decode-context-parallel-size", "2",
         "--enable-expert-parallel"]
    )  # fmt: skip  # flag, value
    setup = build_scheduler(args)
    assert isinstance(setup.scheduler, DataParallelScheduler)
    assert (setup.settings.gpu_count, setup.settings.decode_context_parallel_size) == (4, 2)
