"""Model facts from Hugging Face config.json files as published (issue 18): dense GQA, MoE,
MLA and sliding-window decoders. Each config below is the model's published config.json
(architecture keys; tokenizer ids and the like left out), embedded so nothing downloads.
Expected figures are worked out here from the config, term by term, then held against the
totals each model's authors publish."""

from __future__ import annotations

import copy
import json

import pytest

from agents.hardware import MODEL_PRESETS, ModelFacts, load_model_facts

# deepseek-ai/DeepSeek-V3: MLA + MoE, FP8 weights.
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "attention_bias": False,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 4,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 129280,
}

# mistralai/Mixtral-8x7B-v0.1: GQA + MoE.
MIXTRAL_8X7B = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_experts_per_tok": 2,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "num_local_experts": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}

# google/gemma-2-9b: local (4096-token window) and global layers alternate; tied
# embeddings by Gemma's default; the base repo stores float32 weights.
GEMMA_2_9B = {
    "architectures": ["Gemma2ForCausalLM"],
    "model_type": "gemma2",
    "attention_bias": False,
    "attn_logit_softcapping": 50.0,
    "cache_implementation": "hybrid",
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 3584,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 16,
    "num_hidden_layers": 42,
    "num_key_value_heads": 8,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "sliding_window_size": 4096,
    "torch_dtype": "float32",
    "vocab_size": 256000,
}

# google/gemma-3-1b-it: five sliding (512-token) layers to one global one.
GEMMA_3_1B = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "attention_bias": False,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "intermediate_size": 6912,
    "max_position_embeddings": 32768,
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 1,
    "query_pre_attn_scalar": 256,
    "rope_local_base_freq": 10000,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": 512,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
    "vocab_size": 262144,
}

# meta-llama/Llama-3.1-8B: the dense control.
LLAMA_3_1_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "attention_bias": False,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}

# Qwen/Qwen2.5-7B-Instruct: q/k/v biases; a sliding_window that use_sliding_window turns off.
QWEN2_5_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 152064,
}

# mistralai/Mistral-7B-Instruct-v0.3 (no sliding window) and Mistral-7B-v0.1 (a
# 4096-token window on every layer).
MISTRAL_7B_V03 = {
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32768,
}
MISTRAL_7B_V01 = {
    **MISTRAL_7B_V03,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "vocab_size": 32000,
}

ALL_CONFIGS = {
    "deepseek-v3": DEEPSEEK_V3,
    "mixtral-8x7b": MIXTRAL_8X7B,
    "gemma-2-9b": GEMMA_2_9B,
    "gemma-3-1b": GEMMA_3_1B,
    "llama-3.1-8b": LLAMA_3_1_8B,
    "qwen2.5-7b": QWEN2_5_7B,
    "mistral-7b-v0.3": MISTRAL_7B_V03,
    "mistral-7b-v0.1": MISTRAL_7B_V01,
}

BF16 = 2  # bytes per element of the KV cache at --kv-cache-dtype auto (bf16 models)


def near(value: float, published: float, within: float) -> bool:
    return abs(value / published - 1) <= within


def test_it_counts_deepseek_v3_total_and_active_parameters_from_its_config():
    facts = ModelFacts.from_hf_config(DEEPSEEK_V3, name="deepseek-ai/DeepSeek-V3")
    hidden, heads, vocab, layers = 7168, 128, 129280, 61
    # MLA, per layer: q_a_proj, its norm, q_b_proj to 128 heads of (128 nope + 64 rope);
    # kv_a_proj_with_mqa to the 512 latent + 64 rope, its norm; kv_b_proj from the latent to
    # 128 heads of (128 nope + 128 v); o_proj back from 128 x 128.
    mla = (
        hidden * 1536
        + 1536
        + 1536 * heads * (128 + 64)
        + hidden * (512 + 64)
        + 512
        + 512 * heads * (128 + 128)
        + heads * 128 * hidden
    )
    norms = 2 * hidden
    dense_mlp = 3 * hidden * 18432  # layers 0-2 (first_k_dense_replace = 3)
    expert = 3 * hidden * 2048
    router = 256 * hidden
    moe_layers = layers - 3
    embeddings = 2 * vocab * hidden  # embed_tokens and an untied lm_head
    total = (
        embeddings
        + hidden  # + the final norm
        + layers * (mla + norms)
        + 3 * dense_mlp
        + moe_layers * (router + 1 * expert + 256 * expert)  # 1 shared, 256 routed
    )
    active = total - moe_layers * (256 - 8) * expert  # 8 routed experts per token
    assert (facts.parameters, facts.active_parameters) == (total, active)
    # DeepSeek publishes 671 B total and 37 B activated (the 14 B MTP module aside).
    assert near(facts.parameters, 671e9, 0.01)
    assert near(facts.active_parameters, 37e9, 0.03)
    assert facts.parameters_per_token == active
    assert facts.routed_expert_parameters == moe_layers * 256 * expert
    assert (facts.num_experts, facts.num_experts_per_token, facts.num_shared_experts) == (
        256,
        8,
        1,
    )
    assert (facts.num_moe_layers, facts.moe_intermediate_size) == (58, 2048)
    assert (facts.kv_lora_rank, facts.qk_rope_head_dim, facts.head_dim) == (512, 64, 192)
    # The checkpoint stores FP8 weights (quantization_config): one byte each, but for the
    # embedding table and the LM head, which stay BF16 (vLLM quantizes linear layers only).
    assert facts.dtype == "fp8"
    assert facts.weight_bytes == total + embeddings


def test_it_caches_one_mla_latent_per_layer_the_same_on_every_tensor_parallel_gpu():
    facts = ModelFacts.from_hf_config(DEEPSEEK_V3)
    per_token = 61 * (512 + 64) * BF16  # one latent per layer: no K/V pair, no heads
    assert per_token == 70_272
    for tp in (1, 2, 8, 16):
        assert facts.kv_bytes_per_token("auto", tp) == per_token
        assert facts.kv_bytes_for_context(4096, "auto", tp) == 4096 * per_token
    assert facts.kv_bytes_per_token("fp8") == 61 * (512 + 64) * 1
    # As if it were 128-head MHA with 192/128-wide K/V: about 57 times more.
    assert facts.kv_bytes_per_token() < 2 * 61 * 128 * 192 * BF16 / 50


def test_it_counts_mixtral_experts_and_its_gqa_kv_cache():
    facts = ModelFacts.from_hf_config(MIXTRAL_8X7B, name="mistralai/Mixtral-8x7B-v0.1")
    hidden, layers, vocab = 4096, 32, 32000
    attention = hidden * 32 * 128 + 2 * hidden * 8 * 128 + 32 * 128 * hidden  # q, k+v, o
    expert = 3 * hidden * 14336  # w1, w2, w3
    router = 8 * hidden
    norms = 2 * hidden
    total = 2 * vocab * hidden + hidden + layers * (attention + norms + router + 8 * expert)
    active = total - layers * (8 - 2) * expert
    assert (facts.parameters, facts.active_parameters) == (total, active)
    assert near(facts.parameters, 46.7e9, 0.01)
    assert near(facts.active_parameters, 12.9e9, 0.01)
    assert (facts.num_experts, facts.num_experts_per_token, facts.num_shared_experts) == (8, 2, 0)
    assert (facts.num_moe_layers, facts.moe_intermediate_size) == (32, 14336)
    assert facts.weight_bytes == total * 2
    per_token = 2 * 32 * 8 * 128 * BF16
    assert facts.kv_bytes_per_token() == per_token == 131_072
    assert facts.kv_bytes_per_token("auto", 2) == per_token / 2  # 4 KV heads per GPU
    assert facts.kv_bytes_per_token("auto", 16) == per_token / 8  # one head, replicated
    assert facts.kv_bytes_for_context(32768) == 32768 * per_token
    assert facts.sliding_window is None and facts.sliding_window_layers == ()


def test_it_reads_gemma_2_alternating_local_and_global_layers():
    facts = ModelFacts.from_hf_config(GEMMA_2_9B, name="google/gemma-2-9b")
    hidden, layers, vocab = 3584, 42, 256000
    attention = hidden * 16 * 256 + 2 * hidden * 8 * 256 + 16 * 256 * hidden
    mlp = 3 * hidden * 14336
    norms = 4 * hidden  # pre and post norms around both attention and MLP
    total = vocab * hidden + hidden + layers * (attention + mlp + norms)  # tied embeddings
    assert facts.parameters == total
    assert facts.active_parameters is None and facts.parameters_per_token == total
    assert near(facts.parameters, 9.24e9, 0.005)
    assert facts.dtype == "bfloat16"  # float32 checkpoint, served in 16 bit by --dtype auto
    # Layer 0 is local, layer 1 global, and so on.
    assert facts.sliding_window == 4096
    assert facts.sliding_window_layers == tuple(range(0, 42, 2))
    per_layer_token = 2 * 8 * 256 * BF16
    assert facts.kv_bytes_per_token() == 42 * per_layer_token == 344_064
    assert facts.kv_bytes_for_context(4096) == 4096 * 42 * per_layer_token
    # Beyond the window only the 21 global layers grow.
    grown = facts.kv_bytes_for_context(8192) - facts.kv_bytes_for_context(4096)
    assert grown == 4096 * 21 * per_layer_token
    assert facts.kv_bytes_for_context(8192) == (8192 * 21 + 4096 * 21) * per_layer_token
    assert facts.kv_bytes_for_context(8192) < 8192 * facts.kv_bytes_per_token()
    assert facts.kv_bytes_for_context(8192, "auto", 8) == facts.kv_bytes_for_context(8192) / 8


def test_it_reads_gemma_3_five_sliding_layers_to_one_global():
    facts = ModelFacts.from_hf_config(GEMMA_3_1B)
    hidden, layers, vocab, head = 1152, 26, 262144, 256
    attention = hidden * 4 * head + 2 * hidden * 1 * head + 4 * head * hidden
    norms = 4 * hidden + 2 * head  # four layer norms, q_norm and k_norm
    total = vocab * hidden + hidden + layers * (attention + 3 * hidden * 6912 + norms)
    assert facts.parameters == total
    assert near(facts.parameters, 1.0e9, 0.01)
    assert facts.sliding_window == 512
    global_layers = (5, 11, 17, 23)
    assert facts.sliding_window_layers == tuple(i for i in range(26) if i not in global_layers)
    per_layer_token = 2 * 1 * head * BF16
    assert facts.kv_bytes_for_context(32768) == (4 * 32768 + 22 * 512) * per_layer_token


def test_it_reads_mistral_v0_1_window_on_every_layer():
    facts = ModelFacts.from_hf_config(MISTRAL_7B_V01)
    assert facts.sliding_window_layers == tuple(range(32))
    per_token = 2 * 32 * 8 * 128 * BF16
    assert facts.kv_bytes_for_context(2000) == 2000 * per_token
    assert facts.kv_bytes_for_context(32768) == 4096 * per_token  # capped by the window


def test_it_counts_llama_3_1_8b_exactly_as_the_preset():
    facts = ModelFacts.from_hf_config(LLAMA_3_1_8B, name="meta-llama/Llama-3.1-8B-Instruct")
    hidden, layers, vocab = 4096, 32, 128256
    attention = hidden * 32 * 128 + 2 * hidden * 8 * 128 + 32 * 128 * hidden
    per_layer = attention + 3 * hidden * 14336 + 2 * hidden
    assert facts.parameters == 2 * vocab * hidden + hidden + layers * per_layer == 8_030_261_248
    assert near(facts.parameters, 8.03e9, 0.001)
    assert facts.kv_bytes_per_token() == 2 * 32 * 8 * 128 * BF16
    preset = MODEL_PRESETS["llama-3.1-8b"].facts
    assert facts == preset
    assert facts.to_mapping() == preset.to_mapping()


@pytest.mark.parametrize(
    ("config", "key"),
    [(QWEN2_5_7B, "qwen2.5-7b"), (MISTRAL_7B_V03, "mistral-7b")],
    ids=["qwen2.5-7b", "mistral-7b"],
)
def test_it_counts_the_dense_presets_to_the_weight(config, key):
    """The presets carry the exact count of each model's weights."""
    preset = MODEL_PRESETS[key].facts
    facts = ModelFacts.from_hf_config(config, name=preset.name)
    assert facts == preset
    assert facts.sliding_window is None  # Qwen: use_sliding_window is false


@pytest.mark.parametrize("key", sorted(ALL_CONFIGS))
def test_it_round_trips_every_fact_through_json(key, tmp_path):
    facts = ModelFacts.from_hf_config(ALL_CONFIGS[key], name=key)
    text = json.dumps(facts.to_mapping())
    assert ModelFacts.from_mapping(json.loads(text)) == facts
    # The simulator's JSON file, and a config.json given to it as is, read the same.
    path = tmp_path / "facts.json"
    path.write_text(text)
    assert load_model_facts(str(path)) == facts
    path.write_text(json.dumps(ALL_CONFIGS[key]))
    assert load_model_facts(str(path)) == ModelFacts.from_hf_config(ALL_CONFIGS[key])


def test_it_keeps_a_dense_models_mapping_and_kv_figures_as_they_were():
    before = {
        "name",
        "parameters",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "vocab_size",
        "intermediate_size",
        "max_position_embeddings",
        "dtype",
    }
    for preset in MODEL_PRESETS.values():
        facts = preset.facts
        assert facts.to_mapping().keys() == before
        assert facts.parameters_per_token == facts.parameters
        assert facts.routed_expert_parameters == 0
        for tp in (1, 2, 8, 64):
            # K and V of each layer's KV heads on this GPU (at least one, replicated).
            heads = max(1, facts.num_kv_heads // tp)
            per_token = 2 * facts.num_layers * heads * facts.head_dim * BF16
            assert facts.kv_bytes_per_token("auto", tp) == per_token
            assert facts.kv_bytes_for_context(12_345, "auto", tp) == 12_345 * per_token


def test_it_reads_a_multimodal_wrappers_text_config():
    # Shaped as LLaVA-style wrappers publish it: the decoder's config under text_config.
    wrapper = {
        "architectures": ["LlavaForConditionalGeneration"],
        "model_type": "llava",
        "text_config": LLAMA_3_1_8B,
        "vision_config": {"model_type": "clip_vision_model", "hidden_size": 1024},
    }
    assert ModelFacts.from_hf_config(wrapper) == ModelFacts.from_hf_config(LLAMA_3_1_8B)


def test_it_takes_a_stated_parameter_count_and_derives_the_active_share():
    stated = {**MIXTRAL_8X7B, "num_parameters": 46_000_000_000}
    facts = ModelFacts.from_hf_config(stated)
    derived = ModelFacts.from_hf_config(MIXTRAL_8X7B)
    assert facts.parameters == 46_000_000_000
    assert facts.parameters - facts.active_parameters == (
        derived.parameters - derived.active_parameters
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_size": None}, "missing hidden_size"),
        ({"num_hidden_layers": 0}, "num_hidden_layers must be a whole number"),
        ({"num_key_value_heads": 256}, "num_key_value_heads"),
        ({"model_type": "gpt_neox"}, "model_type 'gpt_neox' is not supported"),
        ({"model_type": None, "architectures": None}, "missing model_type"),
        ({"is_encoder_decoder": True}, "is_encoder_decoder"),
        ({"num_experts_per_tok": None}, "missing num_experts_per_tok"),
        ({"num_experts_per_tok": 300}, "num_experts_per_tok"),
        ({"qk_rope_head_dim": None}, "missing qk_rope_head_dim"),
        ({"v_head_dim": None}, "missing v_head_dim"),
        ({"quantization_config": {"quant_method": "hqq"}}, "quantization_config.quant_method"),
        ({"quantization_config": None, "torch_dtype": "int8"}, "torch_dtype 'int8'"),
        ({"num_parameters": "671B"}, "num_parameters must be a number"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_it_refuses_a_config_it_cannot_read_naming_the_field(change, field):
    config = {**copy.deepcopy(DEEPSEEK_V3), **change}
    untouched = copy.deepcopy(config)
    with pytest.raises(ValueError, match=field):
        ModelFacts.from_hf_config(config)
    assert config == untouched


def test_it_follows_layer_types_and_qwens_max_window_layers():
    gemma = {**GEMMA_2_9B, "layer_types": ["full_attention"] * 40 + ["sliding_attention"] * 2}
    assert ModelFacts.from_hf_config(gemma).sliding_window_layers == (40, 41)
    all_global = {**GEMMA_2_9B, "layer_types": ["full_attention"] * 42}
    facts = ModelFacts.from_hf_config(all_global)
    assert (facts.sliding_window, facts.sliding_window_layers) == (None, ())
    # Qwen slides from max_window_layers on, and only with use_sliding_window.
    qwen = {
        **QWEN2_5_7B,
        "use_sliding_window": True,
        "max_window_layers": 20,
        "sliding_window": 4096,
    }
    facts = ModelFacts.from_hf_config(qwen)
    assert (facts.sliding_window, facts.sliding_window_layers) == (4096, tuple(range(20, 28)))


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (
            {"model_type": "t5", "is_encoder_decoder": True, "d_model": 512, "num_layers": 6},
            "is_encoder_decoder",
        ),
        ({**GEMMA_2_9B, "layer_types": ["chunked_attention"] * 42}, "layer_types"),
        ({**GEMMA_2_9B, "layer_types": ["full_attention"] * 41}, "layer_types"),
        (
            {**QWEN2_5_7B, "use_sliding_window": True, "max_window_layers": None},
            "max_window_layers",
        ),
        ({**MIXTRAL_8X7B, "intermediate_size": None}, "missing intermediate_size"),
        ({"text_config": [1, 2]}, "text_config is not a JSON object"),
    ],
    ids=[
        "t5",
        "chunked",
        "short-layer-types",
        "qwen-window",
        "ffn",
        "text-config",
    ],
)
def test_it_refuses_layer_kinds_it_does_not_know(config, field):
    with pytest.raises(ValueError, match=field):
        ModelFacts.from_hf_config(config)


@pytest.mark.parametrize(
    ("facts", "problem"),
    [
        ({"num_experts": 8, "num_experts_per_token": 9}, "num_experts_per_token"),
        ({"num_experts_per_token": 2}, "need num_experts"),
        ({"num_experts": 8, "num_experts_per_token": 2, "num_moe_layers": 4}, "moe_intermediate"),
        ({"active_parameters": 2e9}, "active_parameters"),
        ({"qk_rope_head_dim": 64}, "needs kv_lora_rank"),
        ({"sliding_window": 4096}, "go together"),
        ({"sliding_window": 4096, "sliding_window_layers": (3, 1)}, "distinct layer indices"),
        ({"sliding_window": 4096, "sliding_window_layers": (40,)}, "distinct layer indices"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_it_refuses_inconsistent_facts(facts, problem):
    with pytest.raises(ValueError, match=problem):
        ModelFacts("m", 1e9, 8, 1024, 8, 8, 128, **facts)
