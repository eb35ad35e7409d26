"""Model facts from a Hugging Face ``config.json``, read as vLLM serves the model.

Guarantees:

- ``hf_config_facts`` reads a config.json as published, or the ``text_config`` a multimodal
  wrapper nests, for the decoder families in ``SUPPORTED_MODEL_TYPES``: dense GQA decoders
  (Llama, Mistral, Qwen2/3, Gemma 1/2/3), mixture-of-experts layers (Mixtral, Qwen MoE,
  DeepSeek-V2/V3, Kimi K2), multi-head latent attention (DeepSeek, Kimi) and sliding-window
  layers. It returns ``ModelFacts``' keyword arguments (all but ``name``).
- The parameter count is the config's own (``num_parameters``) where it states one, else
  counted from the architecture, total and active per token (``_count_parameters`` says
  what is counted). The weights' dtype is the checkpoint's as ``vllm serve --dtype auto``
  loads it: float32 checkpoints serve in 16 bit, and a ``quantization_config`` sets the
  stored width.
- Anything it cannot read faithfully is a ValueError that names the field: an
  encoder-decoder, another model type, a missing or non-positive size, a value of another
  JSON type than the key takes, a layer type or quantization it does not know; whatever
  JSON it is given, it raises nothing else. The mapping it reads is never changed.
- Pure: the standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping

# Model types whose weights follow the layout counted here: a gated MLP (three matrices) or
# gated experts, RMSNorm weights only, and the attention of ``_attention_parameters``.
SUPPORTED_MODEL_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "deepseek_v2",
        "deepseek_v3",
        "kimi_k2",
    }
)
# transformers' default for ``tie_word_embeddings`` when a config leaves it out: True for
# Gemma's configs, False for the others above.
_TIED_BY_DEFAULT = frozenset({"gemma", "gemma2", "gemma3", "gemma3_text"})
# Qwen2's q, k and v projections always carry a bias (there is no attention_bias key).
_QKV_BIAS = frozenset({"qwen2", "qwen2_moe"})
# Per-head RMSNorm on queries and keys (q_norm, k_norm).
_QK_NORM = frozenset({"qwen3", "qwen3_moe", "gemma3", "gemma3_text"})
# Norms around both attention and MLP (pre and post): four per layer instead of two.
_FOUR_NORMS = frozenset({"gemma2", "gemma3", "gemma3_text"})
# transformers' sliding pattern when a config has no layer_types: layer i slides unless
# (i + 1) is a multiple of the pattern (Gemma 2 alternates, starting with a sliding layer).
_DEFAULT_SLIDING_PATTERN = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}
# Qwen's sliding window covers layers from max_window_layers on, when use_sliding_window.
_WINDOW_FROM_MAX_LAYERS = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"})
# Far above any published decoder (a few hundred layers at most).
MAX_LAYERS = 10_000
_STATED_PARAMETERS = ("num_parameters", "parameter_count", "parameters")
_LAYER_TYPES = {"full_attention": False, "sliding_attention": True}


def hf_config_facts(config: Mapping) -> dict:
    """``ModelFacts``' keyword arguments, all but ``name``, for a config.json as published.

    Attention: ``kv_lora_rank`` marks MLA; vLLM caches one latent of ``kv_lora_rank +
    qk_rope_head_dim`` per layer per token, and ``head_dim`` is the query/key head width
    (``qk_nope_head_dim + qk_rope_head_dim``). Otherwise ``head_dim`` is the config's, or
    ``hidden_size / num_attention_heads``, and ``num_key_value_heads`` defaults to the head
    count, as in transformers.

    Experts: ``n_routed_experts``, ``num_local_experts`` (Mixtral) or ``num_experts`` (Qwen
    MoE) routed experts, ``num_experts_per_tok`` of them per token, each of
    ``moe_intermediate_size`` (Mixtral: ``intermediate_size``). A layer is a MoE layer from
    ``first_k_dense_replace`` on, every ``moe_layer_freq``-th (DeepSeek), every
    ``decoder_sparse_step``-th and not in ``mlp_only_layers`` (Qwen); the others keep a dense
    MLP of ``intermediate_size``.

    Sliding windows: ``use_sliding_window: false`` turns ``sliding_window`` off (Qwen);
    otherwise ``layer_types`` names each layer's attention; else Gemma 2 alternates and
    Gemma 3 repeats ``sliding_window_pattern`` (five sliding, one full); else Qwen slides
    from ``max_window_layers`` on; else a ``sliding_window`` covers every layer (Mistral 7B
    v0.1).
    """
    text, where = _language_config(config)
    model_type = _model_type(config, text, where)
    hidden = _size(text, "hidden_size", where)
    layers = _size(text, "num_hidden_layers", where)
    if layers > MAX_LAYERS:
        # The reader walks the layers (experts, windows): a bound keeps that work small.
        raise ValueError(f"{where}: num_hidden_layers must be at most {MAX_LAYERS}, got {layers}")
    heads = _size(text, "num_attention_heads", where)
    vocab = _size(text, "vocab_size", where)
    context = _size(text, "max_position_embeddings", where)
    kv_heads = _size(text, "num_key_value_heads", where, default=heads)
    if kv_heads > heads:
        raise ValueError(
            f"{where}: num_key_value_heads ({kv_heads}) is above num_attention_heads ({heads})"
        )
    mla = _mla(text, where)
    if mla:
        head_dim = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
    else:
        head_dim = _size(text, "head_dim", where, default=hidden // heads)
    moe = _experts(text, layers, where)
    dense_layers = layers - len(moe["layers"]) if moe else layers
    needs_ffn = dense_layers > 0 or (moe and moe["size"] is None)
    intermediate = _size(text, "intermediate_size", where) if needs_ffn else None
    if moe and moe["size"] is None:
        moe["size"] = intermediate  # Mixtral: each expert is an ordinary MLP
    window, sliding_layers = _sliding_layers(text, model_type, layers, where)
    tied = _get(text, "tie_word_embeddings", _get(config, "tie_word_embeddings", None))
    if tied is None:
        tied = model_type in _TIED_BY_DEFAULT
    total, active = _count_parameters(
        model_type=model_type,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab=vocab,
        intermediate=intermediate,
        tied=bool(tied),
        mla=mla,
        moe=moe,
        attention_bias=bool(_get(text, "attention_bias", False)),
    )
    stated_as = next((key for key in _STATED_PARAMETERS if config.get(key) is not None), None)
    if stated_as is not None:
        stated = config[stated_as]
        if isinstance(stated, bool) or not isinstance(stated, int | float) or stated <= 0:
            raise ValueError(f"config.json: {stated_as} must be a number above 0, got {stated!r}")
        # The architecture still says which share of a stated count the unused experts are.
        total, active = stated, stated - (total - active)
    facts = {
        "parameters": total,
        "active_parameters": active if moe else None,
        "num_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": vocab,
        "intermediate_size": intermediate,
        "max_position_embeddings": context,
        "dtype": _weight_dtype(config, text, where),
        "sliding_window": window,
        "sliding_window_layers": sliding_layers,
    }
    if mla:
        facts["kv_lora_rank"] = mla["kv_lora_rank"]
        facts["qk_rope_head_dim"] = mla["qk_rope_head_dim"]
    if moe:
        facts["num_experts"] = moe["experts"]
        facts["num_experts_per_token"] = moe["per_token"]
        facts["num_shared_experts"] = moe["shared"]
        facts["moe_intermediate_size"] = moe["size"]
        facts["num_moe_layers"] = len(moe["layers"])
    return facts


def _count_parameters(
    *,
    model_type,
    hidden,
    layers,
    heads,
    kv_heads,
    head_dim,
    vocab,
    intermediate,
    tied,
    mla,
    moe,
    attention_bias,
) -> tuple[int, int]:
    """(total, active per token) of the language model's weights.

    Counted: the embedding table, the LM head unless tied, every attention projection
    (MLA's low-rank ones and their norms too), the q/k/v biases Qwen2 carries (all four
    with ``attention_bias``), the dense MLPs (gate, up, down), each MoE layer's router,
    shared and routed experts, and every RMSNorm weight. Not counted: vision towers,
    DeepSeek's multi-token-prediction layers (``num_nextn_predict_layers``: vLLM loads them
    only for speculative decoding), routers' score biases and quantization scales; each is
    under 0.1 % of these models. Active = total less the routed experts a token skips, so
    it includes the embedding and LM head, as published active counts do.
    """
    per_layer = (4 if model_type in _FOUR_NORMS else 2) * hidden
    if mla:
        per_layer += _mla_parameters(hidden, heads, mla)
    else:
        q, kv = heads * head_dim, kv_heads * head_dim
        per_layer += hidden * q + 2 * hidden * kv + q * hidden
        if model_type in _QKV_BIAS:
            per_layer += q + 2 * kv
        elif attention_bias:
            per_layer += q + 2 * kv + hidden
        if model_type in _QK_NORM:
            per_layer += 2 * head_dim
    total = active = vocab * hidden * (1 if tied else 2) + hidden + layers * per_layer
    moe_layers = len(moe["layers"]) if moe else 0
    dense_mlp = 3 * hidden * intermediate if layers > moe_layers else 0
    total += (layers - moe_layers) * dense_mlp
    active += (layers - moe_layers) * dense_mlp
    if moe:
        expert = 3 * hidden * moe["size"]
        always = moe["experts"] * hidden + moe["shared_parameters"]  # router + shared
        total += moe_layers * (always + moe["experts"] * expert)
        active += moe_layers * (always + moe["per_token"] * expert)
    return total, active


def _mla_parameters(hidden: int, heads: int, mla: dict) -> int:
    """One layer of multi-head latent attention (DeepSeek-V2/V3)."""
    rank, rope = mla["kv_lora_rank"], mla["qk_rope_head_dim"]
    qk_head = mla["qk_nope_head_dim"] + rope
    q_rank = mla["q_lora_rank"]
    if q_rank:  # q_a_proj, its norm, q_b_proj
        query = hidden * q_rank + q_rank + q_rank * heads * qk_head
    else:  # DeepSeek-V2-Lite: one q_proj
        query = hidden * heads * qk_head
    latent = hidden * (rank + rope) + rank  # kv_a_proj_with_mqa and its norm
    expand = rank * heads * (mla["qk_nope_head_dim"] + mla["v_head_dim"])  # kv_b_proj
    output = heads * mla["v_head_dim"] * hidden  # o_proj
    return query + latent + expand + output


def _language_config(config: Mapping) -> tuple[Mapping, str]:
    """The decoder's config: a multimodal wrapper's ``text_config``, else the config."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config.json: expected a JSON object, got {type(config).__name__}")
    if _get(config, "is_encoder_decoder", False):
        raise ValueError(
            "config.json: is_encoder_decoder is true; only decoder-only models are supported"
        )
    text = config.get("text_config")
    if text is None:
        return config, "config.json"
    if not isinstance(text, Mapping):
        raise ValueError("config.json: text_config is not a JSON object")
    if _get(text, "is_encoder_decoder", False):
        raise ValueError(
            "config.json text_config: is_encoder_decoder is true; only decoder-only models "
            "are supported"
        )
    return text, "config.json text_config"


def _model_type(config: Mapping, text: Mapping, where: str) -> str:
    model_type = _get(text, "model_type", None) or _get(config, "model_type", None)
    if model_type is None:
        raise ValueError(f"{where}: missing model_type")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(
            f"{where}: model_type {model_type!r} is not supported "
            f"(supported: {', '.join(sorted(SUPPORTED_MODEL_TYPES))})"
        )
    return model_type


def _mla(text: Mapping, where: str) -> dict | None:
    """MLA's sizes where the config has ``kv_lora_rank``, else None."""
    if _get(text, "kv_lora_rank", None) is None:
        return None
    mla = {
        key: _size(text, key, where)
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    }
    mla["q_lora_rank"] = _size(text, "q_lora_rank", where, default=0, allow_zero=True)
    return mla


def _experts(text: Mapping, layers: int, where: str) -> dict | None:
    """The MoE layers' facts, or None for a dense model."""
    key = next(
        (k for k in ("n_routed_experts", "num_local_experts", "num_experts") if _get(text, k)),
        None,
    )
    if key is None:
        return None
    experts = _size(text, key, where)
    per_token = _size(text, "num_experts_per_tok", where)
    if per_token > experts:
        raise ValueError(f"{where}: num_experts_per_tok ({per_token}) is above {key} ({experts})")
    first_dense = _size(text, "first_k_dense_replace", where, default=0, allow_zero=True)
    frequency = _size(text, "moe_layer_freq", where, default=1)
    step = _size(text, "decoder_sparse_step", where, default=1)
    mlp_only = set(_indices(text, "mlp_only_layers", where))
    moe_layers = [
        i
        for i in range(layers)
        if i >= first_dense and i % frequency == 0 and (i + 1) % step == 0 and i not in mlp_only
    ]
    if not moe_layers:
        return None
    given = _get(text, "moe_intermediate_size", None) is not None
    size = _size(text, "moe_intermediate_size", where) if given else None
    hidden = _size(text, "hidden_size", where)
    shared = _size(text, "n_shared_experts", where, default=0, allow_zero=True)
    shared_parameters = shared * 3 * hidden * (size or 0)
    if shared and size is None:
        raise ValueError(f"{where}: n_shared_experts without moe_intermediate_size")
    qwen_shared = _size(text, "shared_expert_intermediate_size", where, default=0, allow_zero=True)
    if qwen_shared:
        # Qwen2-MoE: one wider shared expert behind a one-output sigmoid gate.
        shared = 1
        shared_parameters = 3 * hidden * qwen_shared + hidden
    return {
        "experts": experts,
        "per_token": per_token,
        "size": size,
        "shared": shared,
        "shared_parameters": shared_parameters,
        "layers": moe_layers,
    }


def _sliding_layers(
    text: Mapping, model_type: str, layers: int, where: str
) -> tuple[int | None, tuple[int, ...]]:
    """(window, indices of the layers that attend only within it); (None, ()) for none."""
    window = _get(text, "sliding_window", None)
    if window is None or _get(text, "use_sliding_window", True) is False:
        return None, ()
    window = _size(text, "sliding_window", where)
    layer_types = _get(text, "layer_types", None)
    if layer_types is not None and not isinstance(layer_types, list):
        raise ValueError(f"{where}: layer_types must be a list, one entry per layer")
    if layer_types is not None:
        unknown = sorted({str(kind) for kind in layer_types} - set(_LAYER_TYPES))
        if unknown or len(layer_types) != layers:
            problem = f"unknown {unknown}" if unknown else f"{len(layer_types)} for {layers}"
            raise ValueError(
                f"{where}: layer_types ({problem}) must give each of the {layers} layers one "
                f"of {sorted(_LAYER_TYPES)}"
            )
        sliding = tuple(i for i, kind in enumerate(layer_types) if _LAYER_TYPES[kind])
    elif model_type in _DEFAULT_SLIDING_PATTERN:
        pattern = _size(
            text, "sliding_window_pattern", where, default=_DEFAULT_SLIDING_PATTERN[model_type]
        )
        sliding = tuple(i for i in range(layers) if (i + 1) % pattern)
    elif model_type in _WINDOW_FROM_MAX_LAYERS:
        first = _size(text, "max_window_layers", where, allow_zero=True)
        sliding = tuple(range(first, layers))
    else:
        sliding = tuple(range(layers))
    return (window, sliding) if sliding else (None, ())


def _weight_dtype(config: Mapping, text: Mapping, where: str) -> str:
    """The stored width of the weights as vLLM loads them (a ``WEIGHT_BYTES`` key)."""
    quantization = _get(text, "quantization_config", None) or _get(
        config, "quantization_config", None
    )
    if quantization:
        if not isinstance(quantization, Mapping):
            raise ValueError(f"{where}: quantization_config must be a JSON object")
        return _quantized_dtype(quantization, where)
    dtype = (
        _get(text, "torch_dtype", None)
        or _get(text, "dtype", None)
        or _get(config, "torch_dtype", None)
        or _get(config, "dtype", None)
        or "bfloat16"
    )
    # --dtype auto serves a float32 checkpoint in 16 bit (bfloat16 where the GPU has it).
    if dtype == "float32":
        return "bfloat16"
    if dtype not in ("bfloat16", "float16"):
        raise ValueError(f"{where}: torch_dtype {dtype!r} is not one of bfloat16, float16, float32")
    return dtype


def _quantized_dtype(quantization: Mapping, where: str) -> str:
    method = str(quantization.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method == "modelopt":
        algo = str(quantization.get("quant_algo", "")).upper()
        if algo in ("FP8", "NVFP4"):
            return algo.lower()
    if method in ("awq", "gptq", "awq_marlin", "gptq_marlin"):
        bits = quantization.get("bits", 4)
        if bits == 4:
            return method.removesuffix("_marlin")
        if bits == 8:
            return "int8"
    elif method == "compressed-tensors":
        groups = quantization.get("config_groups") or {}
        widths = set()
        for group in groups.values() if isinstance(groups, Mapping) else [None]:
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if not isinstance(weights, Mapping):
                weights = {}  # not the shape compressed-tensors writes: refused below
            bits, kind = weights.get("num_bits"), weights.get("type")
            widths.add(
                (bits if isinstance(bits, int) else None, kind if isinstance(kind, str) else None)
            )
        if widths == {(8, "float")}:
            return "fp8"
        if widths == {(8, "int")}:
            return "int8"
        if widths == {(4, "int")}:
            return "int4"
        if widths == {(4, "float")}:
            return "nvfp4"
    elif method == "bitsandbytes":
        if quantization.get("load_in_4bit"):
            return "int4"
        if quantization.get("load_in_8bit"):
            return "int8"
    raise ValueError(
        f"{where}: quantization_config.quant_method {method!r} with these settings is not "
        "supported (fp8, mxfp4, modelopt FP8/NVFP4, awq, gptq, compressed-tensors and "
        "bitsandbytes at 4 or 8 bits are)"
    )


def _get(config: Mapping, key: str, default=None):
    """The config's value, with ``null`` read as absent (as transformers does)."""
    value = config.get(key)
    return default if value is None else value


def _indices(config: Mapping, key: str, where: str) -> list[int]:
    """A list of layer indices (absent: none)."""
    value = _get(config, key, [])
    if not isinstance(value, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
    ):
        raise ValueError(f"{where}: {key} must be a list of layer indices (whole numbers)")
    return value


def _size(config: Mapping, key: str, where: str, *, default=None, allow_zero=False) -> int:
    value = _get(config, key, default)
    if value is None:
        raise ValueError(f"{where}: missing {key}")
    least = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{where}: {key} must be a whole number of {least} or more, got {value!r}")
    return value
