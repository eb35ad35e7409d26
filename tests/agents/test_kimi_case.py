"""The talk's case end to end, SIMULATED (issue 34): a Kimi-K2-class model (1T total, 32B
active, MLA, 384 experts of which 8 per token) on 8 x B300 with expert parallelism and
decode context parallelism, a coding agent's sessions of a 1M-token context, predicted by
``benchsite-agent predict`` to an answer: capacity at the SLOs and its cost per 1M output
tokens. docs/gpu-path.md writes it up."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agents.cli import main
from agents.hardware import ModelFacts, StartRefusal, gpu_profile, start_check
from figures.gpu_share import GpuShare
from runs.costs import level_cost_per_million_output_tokens
from runs.gpu_catalogue_seed import GPU_CATALOGUE
from tests.agents.test_hf_configs import DEEPSEEK_V3

# moonshotai/Kimi-K2-Instruct's config.json is DeepSeek-V3's architecture with 384 routed
# experts, 64 attention heads, one dense layer, a 163,840-token vocabulary and one expert
# group; its context is stretched to the talk's 1M tokens (max_position_embeddings).
KIMI_CLASS = {
    **DEEPSEEK_V3,
    "model_type": "kimi_k2",
    "first_k_dense_replace": 1,
    "n_routed_experts": 384,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "vocab_size": 163840,
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 2.827,
    "rope_theta": 50000.0,
    "max_position_embeddings": 1_048_576,
}
CONTEXT = 1_000_000
SERVE = {
    "tensor_parallel_size": 8,
    "enable_expert_parallel": True,
    "decode_context_parallel_size": 8,
    "max_model_len": 1_048_576,
}
# A coding agent's session: a 1M-token repository context shared by every session, then
# two turns of a task, tool output and a 400-token answer.
SESSIONS = {
    "min_turns": 2,
    "max_turns": 2,
    "system_len": CONTEXT,
    "task_len": 1000,
    "output_len": 400,
    "tool_output_len": 2000,
    "subagent_probability": 0,
}


def test_the_model_is_kimi_k2_class():
    facts = ModelFacts.from_hf_config(KIMI_CLASS)
    assert facts.parameters == pytest.approx(1.03e12, rel=0.01)  # Moonshot: 1T total
    assert facts.active_parameters == pytest.approx(32.9e9, rel=0.01)  # 32B activated
    assert (facts.num_experts, facts.num_experts_per_token, facts.kv_lora_rank) == (384, 8, 512)


def test_decode_context_parallel_holds_eight_times_the_million_token_sessions():
    facts, b300 = ModelFacts.from_hf_config(KIMI_CLASS), gpu_profile("B300")
    _, split = start_check(facts, b300, SERVE)
    _, whole = start_check(facts, b300, {**SERVE, "decode_context_parallel_size": 1})
    # Without DCP every TP GPU holds the whole MLA latent of every token: one session of
    # the context at a time. Split over the 8 GPUs, the same memory holds 8 times the tokens.
    assert whole.kv_tokens // CONTEXT == 1
    assert split.kv_tokens == 8 * whole.kv_tokens
    with pytest.raises(StartRefusal, match="tp_size=8 must be divisible by dcp_size=16"):
        start_check(facts, b300, {**SERVE, "decode_context_parallel_size": 16})


# A million-token prefill and its sessions in simulated time: 15–25 s of CPU (the slow tier).
@pytest.mark.slow
def test_the_talks_case_predicts_capacity_and_cost_simulated(tmp_path):
    model, serve, out = tmp_path / "config.json", tmp_path / "serve.json", tmp_path / "out.json"
    model.write_text(json.dumps(KIMI_CLASS))
    serve.write_text(json.dumps(SERVE))
    assert main(["predict", "--model-spec", str(model), "--gpu", "B300", "--config", str(serve),
                 "--dataset", f"agentic:{json.dumps(SESSIONS)}", "--concurrency", "1",
                 "--num-prompts", "4", "--slo", "ttft:p90<120s, tpot:p90<15ms",
                 "--capacity-search", "concurrency", "--max-probes", "1",
                 "--json", str(out)]) == 0  # fmt: skip  # flag, value
    answer = json.loads(out.read_text())
    assert answer["simulated"] is True
    assert answer["prediction"]["kv_cache_tokens"] > 8 * CONTEXT
    # Every request carries the whole million-token context.
    first = answer["levels"][0]
    assert first["total_input_tokens"] / first["completed"] > CONTEXT
    capacity = answer["capacity"]
    assert capacity["capacity"] == capacity["bracket_low"] >= 1
    # Its cost at capacity: the 8 GPUs it uses at the seeded B300 price.
    price = Decimal(next(row[2] for row in GPU_CATALOGUE if row[0] == "NVIDIA B300 SXM6 AC"))
    cost = level_cost_per_million_output_tokens(
        output_throughput_tok_s=capacity["output_throughput"],
        pod_usd_per_hr=8 * price,
        share=GpuShare.of(SERVE, pod_gpus=8),
    )
    by_hand = 8 * float(price) / 3600 / capacity["output_throughput"] * 1e6
    assert float(cost) == pytest.approx(by_hand, abs=1e-4)
