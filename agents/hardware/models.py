"""Model facts: what the memory maths and the roofline need to know about a model.

Guarantees:

- ``ModelFacts`` holds the facts a registered Benchsite model carries: its columns
  (parameters, layers, hidden size, heads, KV heads, head dim, dtype, context) and the
  facts beyond them (vocabulary, FFN, experts, MLA, sliding windows) with stated defaults.
  ``ModelFacts.from_registered`` / ``to_registered`` + ``to_architecture`` are the one
  translation from and to the site's (and the job's ``ModelSource``) field names
  (``REGISTERED_FACTS``) and its architecture mapping (``ARCHITECTURE_FACTS``), used by the
  site and the simulator alike, so both reason about the same model.
- Bytes per element: weights take their stored dtype (``WEIGHT_BYTES``; a quantized
  checkpoint's embedding table and LM head stay 16 bit); activations and the KV cache take
  the compute dtype (``ACTIVATION_BYTES``): quantized weights still cache in 16 bit.
- Beyond dense GQA decoders, ``ModelFacts`` knows mixture-of-experts layers (total and
  active parameters, expert counts), multi-head latent attention (``kv_lora_rank``) and
  sliding-window layers; their defaults describe a dense model with full attention, for which
  every figure is what it was before they existed. ``ModelFacts.from_hf_config`` reads them
  from a Hugging Face config.json (``agents.hardware.hf_config``).
- ``to_mapping`` / ``from_mapping`` round-trip every fact; a dense model's mapping carries
  none of the newer facts, so it reads as it always did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

from agents.hardware.hf_config import hf_config_facts

WEIGHT_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "auto": 2.0,
    "float32": 4.0,
    "float": 4.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,  # AWQ / GPTQ 4-bit; their small scales are ignored
    "awq": 0.5,
    "gptq": 0.5,
    # 4-bit floats with a shared 8-bit scale per block: NVFP4 per 16 values, MXFP4 per 32.
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
}
# Stored widths of quantized checkpoints (the rest are plain 16- or 32-bit floats): their
# linear layers are quantized, their embedding table and LM head stay 16 bit.
QUANTIZED_DTYPES = frozenset({"fp8", "int8", "int4", "awq", "gptq", "nvfp4", "mxfp4"})
ACTIVATION_BYTES = {dtype: 4.0 if size == 4.0 else 2.0 for dtype, size in WEIGHT_BYTES.items()}
FP8_CACHE_BYTES = 1.0  # any --kv-cache-dtype other than auto (fp8, fp8_e4m3, fp8_e5m2)


# Each fact a registered model carries: its name on the site (and in ModelSource) → its
# name in ModelFacts.
_REGISTERED_AS = {
    "hf_repo": "name",
    "parameter_count": "parameters",
    "num_layers": "num_layers",
    "hidden_size": "hidden_size",
    "num_attention_heads": "num_attention_heads",
    "num_kv_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "dtype": "dtype",
    "max_context": "max_position_embeddings",
}
# The site's (and ModelSource's) names of what ``ModelFacts.from_registered`` takes.
REGISTERED_FACTS = frozenset(_REGISTERED_AS)
# A mapping with any of these keys is a Hugging Face config.json, not the site's JSON.
_HF_CONFIG_KEYS = frozenset({"model_type", "architectures", "text_config"})
# Facts beyond a dense full-attention decoder: ``to_mapping`` leaves them out at their
# defaults, so a dense model's mapping is what it was before they existed.
_BEYOND_DENSE = (
    "active_parameters",
    "num_experts",
    "num_experts_per_token",
    "num_shared_experts",
    "moe_intermediate_size",
    "num_moe_layers",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "sliding_window",
    "sliding_window_layers",
)


@dataclass(frozen=True)
class ModelFacts:
    """The architecture facts of a decoder-only transformer.

    ``parameters`` counts every weight vLLM loads (all experts of a MoE model);
    ``active_parameters`` those one token runs through (None: all of them, a dense model).
    MoE layers: ``num_moe_layers`` of the ``num_layers`` route each token to
    ``num_experts_per_token`` of ``num_experts`` experts of ``moe_intermediate_size``, plus
    ``num_shared_experts`` every token uses; 0 experts is a dense model.
    ``kv_lora_rank`` > 0 is multi-head latent attention: each layer caches one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per token instead of per-head K and V, and
    ``head_dim`` is then the query/key head width. ``sliding_window_layers`` (indices) attend
    only to the last ``sliding_window`` tokens; the other layers attend to the whole context.
    """

    name: str
    parameters: float
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int = 32_000
    intermediate_size: int | None = None
    max_position_embeddings: int = 4096
    dtype: str = "bfloat16"
    active_parameters: float | None = None
    num_experts: int = 0
    num_experts_per_token: int = 0
    num_shared_experts: int = 0
    moe_intermediate_size: int | None = None
    num_moe_layers: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    sliding_window: int | None = None
    sliding_window_layers: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        problems = []
        for name in ("parameters", "num_layers", "hidden_size", "num_attention_heads"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be above 0")
        if not 0 < self.num_kv_heads <= self.num_attention_heads:
            problems.append("num_kv_heads must be in 1..num_attention_heads")
        if self.dtype not in WEIGHT_BYTES:
            problems.append(f"dtype {self.dtype!r} is not one of {sorted(WEIGHT_BYTES)}")
        problems += self._mixture_problems() + self._attention_problems()
        if problems:
            raise ValueError(f"model spec {self.name!r}: " + "; ".join(problems))

    def _mixture_problems(self) -> list[str]:
        if self.active_parameters is not None and not (
            0 < self.active_parameters <= self.parameters
        ):
            return ["active_parameters must be above 0 and at most parameters"]
        if not self.num_experts:
            if self.num_experts_per_token or self.num_shared_experts or self.num_moe_layers:
                return ["expert counts need num_experts (0 is a dense model)"]
            return []
        problems = []
        if not 0 < self.num_experts_per_token <= self.num_experts:
            problems.append("num_experts_per_token must be in 1..num_experts")
        if not 0 < self.num_moe_layers <= self.num_layers:
            problems.append("num_moe_layers must be in 1..num_layers")
        if not (self.moe_intermediate_size or 0) > 0:
            problems.append("a MoE model needs moe_intermediate_size above 0")
        if self.num_shared_experts < 0:
            problems.append("num_shared_experts must be 0 or more")
        return problems

    def _attention_problems(self) -> list[str]:
        problems = []
        if self.kv_lora_rank < 0 or self.qk_rope_head_dim < 0:
            problems.append("kv_lora_rank and qk_rope_head_dim must be 0 or more")
        elif self.qk_rope_head_dim and not self.kv_lora_rank:
            problems.append("qk_rope_head_dim is an MLA fact: it needs kv_lora_rank")
        layers = self.sliding_window_layers
        if (self.sliding_window is None) != (not layers):
            problems.append("sliding_window and sliding_window_layers go together")
        elif self.sliding_window is not None and not self.sliding_window > 0:
            problems.append("sliding_window must be above 0")
        elif list(layers) != sorted(set(layers)) or not all(
            0 <= i < self.num_layers for i in layers
        ):
            problems.append("sliding_window_layers must be distinct layer indices, in order")
        return problems

    @property
    def weight_bytes(self) -> float:
        """Every weight vLLM loads (all experts of a MoE model), at its stored width. A
        quantized checkpoint keeps its embedding table and LM head in 16 bit (vLLM quantizes
        linear layers only): Llama 3.1 8B FP8 loads 8.46 GiB, not 7.48. Counted as two
        tables, untied, as the step model counts them."""
        width = WEIGHT_BYTES[self.dtype]
        if self.dtype not in QUANTIZED_DTYPES:
            return self.parameters * width
        tables = min(self.parameters, 2 * self.vocab_size * self.hidden_size)
        return (self.parameters - tables) * width + tables * 2.0

    @property
    def parameters_per_token(self) -> float:
        """The weights one token's forward pass uses: ``active_parameters`` for a MoE model
        (counting the embedding table and LM head, as published counts do), else all."""
        return self.parameters if self.active_parameters is None else self.active_parameters

    @property
    def routed_expert_parameters(self) -> float:
        """The routed experts' weights (gate, up and down of each), all MoE layers; 0 for a
        dense model. A step reads only the experts its tokens are routed to."""
        expert = 3 * self.hidden_size * (self.moe_intermediate_size or 0)
        return self.num_moe_layers * self.num_experts * expert

    @property
    def activation_bytes(self) -> float:
        return ACTIVATION_BYTES[self.dtype]

    def kv_bytes_per_token(
        self, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1
    ) -> float:
        """The KV cache one token of context takes on one GPU with every layer holding it:
        the full-attention cost, exact while a context is within any sliding window and an
        upper bound beyond it (``kv_bytes_for_context`` is exact at any length).

        Per layer, K and V of the layer's KV heads, which vLLM splits over the
        tensor-parallel GPUs (or replicates when there are fewer heads than GPUs). With MLA
        (``kv_lora_rank``), one latent of ``kv_lora_rank + qk_rope_head_dim`` elements: no
        separate K and V, no per-head copies, and vLLM keeps the whole latent on every
        tensor-parallel GPU, so it does not shrink with more of them."""
        if self.kv_lora_rank:
            latent = self._kv_bytes_per_layer_token(kv_cache_dtype, tensor_parallel_size)
            return self.num_layers * latent
        element = self.activation_bytes if kv_cache_dtype == "auto" else FP8_CACHE_BYTES
        heads = max(1, self.num_kv_heads // tensor_parallel_size)
        return 2 * self.num_layers * heads * self.head_dim * element

    def kv_bytes_for_context(
        self, context: int, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1
    ) -> float:
        """The KV cache one sequence of ``context`` tokens holds on one GPU: full-attention
        layers keep all ``context`` tokens, sliding-window layers at most the last
        ``sliding_window`` (vLLM's hybrid KV cache manager frees the blocks that fall out of
        the window). Token-exact: vLLM allocates whole blocks of ``block_size`` tokens and a
        sliding layer also keeps the window's edge and the current step's tokens, a block or
        a chunk more at most. Without sliding layers: ``context * kv_bytes_per_token``."""
        per_layer = self._kv_bytes_per_layer_token(kv_cache_dtype, tensor_parallel_size)
        sliding = len(self.sliding_window_layers)
        window = min(context, self.sliding_window or 0)
        return ((self.num_layers - sliding) * context + sliding * window) * per_layer

    def _kv_bytes_per_layer_token(self, kv_cache_dtype: str, tensor_parallel_size: int) -> float:
        element = self.activation_bytes if kv_cache_dtype == "auto" else FP8_CACHE_BYTES
        if self.kv_lora_rank:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * element
        heads = max(1, self.num_kv_heads // tensor_parallel_size)
        return 2 * heads * self.head_dim * element

    @property
    def ffn_size(self) -> int:
        # Llama-style SwiGLU models use about 3.5x the hidden size when not told.
        return self.intermediate_size or math.ceil(3.5 * self.hidden_size)

    @classmethod
    def from_registered(cls, *, architecture: Mapping | None = None, **registered) -> ModelFacts:
        """The facts of a model registered on the site (or sent in a job's ``ModelSource``),
        given as exactly the ``REGISTERED_FACTS`` and, in ``architecture``, any of the
        ``ARCHITECTURE_FACTS`` (``to_architecture``'s mapping; a fact left out takes its
        default, so None or ``{}`` is a dense model of default vocabulary and FFN). Any other
        name is a TypeError; facts that contradict each other are a ValueError."""
        if registered.keys() != REGISTERED_FACTS:
            raise TypeError(
                f"from_registered takes {sorted(REGISTERED_FACTS)}, got {sorted(registered)}"
            )
        beyond = dict(architecture or {})
        unknown = beyond.keys() - ARCHITECTURE_FACTS
        if unknown:
            raise TypeError(
                f"architecture takes {sorted(ARCHITECTURE_FACTS)}, got {sorted(unknown)}"
            )
        if beyond.get("sliding_window_layers") is not None:
            beyond["sliding_window_layers"] = tuple(beyond["sliding_window_layers"])
        named = {_REGISTERED_AS[key]: value for key, value in registered.items()}
        return cls(**named, **beyond)

    def to_registered(self) -> dict:
        """These facts in the site's field names, which ``from_registered`` reads back; the
        facts beyond them are ``to_architecture``'s."""
        return {key: getattr(self, name) for key, name in _REGISTERED_AS.items()}

    def to_architecture(self) -> dict:
        """The facts beyond ``to_registered``'s, as ``to_mapping`` writes them (JSON: a list
        of sliding layers; MoE, MLA and sliding-window facts only where they differ from
        their defaults) less those that are None: the mapping
        ``from_registered(architecture=…)`` reads back as these very facts."""
        mapping = self.to_mapping()
        return {
            name: value
            for name, value in mapping.items()
            if name in ARCHITECTURE_FACTS and value is not None
        }

    def to_mapping(self) -> dict:
        """The JSON object ``from_mapping`` reads back as these very facts; the facts beyond
        a dense full-attention model appear only where they differ from their defaults."""
        data = asdict(self)
        data.pop("extra")
        defaults = {f.name: f.default for f in fields(self)}
        for name in _BEYOND_DENSE:
            if data[name] == defaults[name]:
                del data[name]
        if "sliding_window_layers" in data:
            data["sliding_window_layers"] = list(data["sliding_window_layers"])
        return data

    @classmethod
    def from_hf_config(cls, config: Mapping, *, name: str = "model") -> ModelFacts:
        """The facts of a model from its Hugging Face config.json as published (or a
        multimodal wrapper's ``text_config``): dense, MoE, MLA and sliding-window decoders.
        The parameter count is derived from the architecture where the config has none;
        what cannot be read faithfully is a ValueError naming the field
        (``agents.hardware.hf_config`` says what is read and counted)."""
        return cls(name=name, **hf_config_facts(config))

    @classmethod
    def from_mapping(cls, data: dict) -> ModelFacts:
        """Reads the site's ModelFacts JSON, or a Hugging Face config.json (one with a
        ``model_type``, ``architectures`` or ``text_config``) through ``from_hf_config``."""
        if _HF_CONFIG_KEYS & data.keys():
            return cls.from_hf_config(data, name=data.get("name") or "model")
        aliases = {
            "num_parameters": "parameters",
            "parameter_count": "parameters",
            "num_hidden_layers": "num_layers",
            "layers": "num_layers",
            "num_key_value_heads": "num_kv_heads",
            "kv_heads": "num_kv_heads",
            "torch_dtype": "dtype",
            "max_model_len": "max_position_embeddings",
            "context_length": "max_position_embeddings",
        }
        known = {f.name for f in fields(cls)}
        values: dict = {}
        extra: dict = {}
        for key, value in data.items():
            key = aliases.get(key, key)
            (values if key in known else extra)[key] = value
        if "head_dim" not in values and "hidden_size" in values:
            values["head_dim"] = values["hidden_size"] // values.get("num_attention_heads", 1)
        values.setdefault("num_kv_heads", values.get("num_attention_heads", 1))
        values.setdefault("name", "model")
        if "sliding_window_layers" in values:
            values["sliding_window_layers"] = tuple(values["sliding_window_layers"])
        missing = {"parameters", "num_layers", "hidden_size", "num_attention_heads"} - set(values)
        if missing:
            raise ValueError(f"model spec: missing {', '.join(sorted(missing))}")
        return cls(**values, extra=extra)


# What a registered model carries beyond its columns (``to_architecture``): every fact but
# the ``REGISTERED_FACTS`` and the free-form ``extra``.
ARCHITECTURE_FACTS = frozenset(
    f.name for f in fields(ModelFacts) if f.name not in {*_REGISTERED_AS.values(), "extra"}
)
