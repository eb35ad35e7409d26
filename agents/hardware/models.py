"""Model facts: what the memory maths and the roofline need to know about a model.

Guarantees:

- ``ModelFacts`` holds exactly the facts a registered Benchsite model carries (parameters,
  layers, hidden size, heads, KV heads, head dim, dtype, context), plus vocabulary and FFN
  sizes with stated defaults. ``ModelFacts.from_registered`` / ``to_registered`` are the one
  translation from and to the site's (and the job's ``ModelSource``) field names
  (``REGISTERED_FACTS``), used by the site and the simulator alike, so both reason about the
  same model.
- Bytes per element: weights take their stored dtype (``WEIGHT_BYTES``); activations and
  the KV cache take the compute dtype (``ACTIVATION_BYTES``): quantized weights still compute
  and cache in 16 bit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields

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
}
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


@dataclass(frozen=True)
class ModelFacts:
    """The architecture facts of a decoder-only transformer."""

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
        if problems:
            raise ValueError(f"model spec {self.name!r}: " + "; ".join(problems))

    @property
    def weight_bytes(self) -> float:
        return self.parameters * WEIGHT_BYTES[self.dtype]

    @property
    def activation_bytes(self) -> float:
        return ACTIVATION_BYTES[self.dtype]

    def kv_bytes_per_token(
        self, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1
    ) -> float:
        """K and V of every layer for one token on one GPU (KV heads are split over the
        tensor-parallel GPUs, or replicated when there are fewer of them than GPUs)."""
        element = self.activation_bytes if kv_cache_dtype == "auto" else FP8_CACHE_BYTES
        heads = max(1, self.num_kv_heads // tensor_parallel_size)
        return 2 * self.num_layers * heads * self.head_dim * element

    @property
    def ffn_size(self) -> int:
        # Llama-style SwiGLU models use about 3.5x the hidden size when not told.
        return self.intermediate_size or math.ceil(3.5 * self.hidden_size)

    @classmethod
    def from_registered(cls, **registered) -> ModelFacts:
        """The facts of a model registered on the site (or sent in a job's ``ModelSource``),
        given as exactly the ``REGISTERED_FACTS``; any other set of names is a TypeError."""
        if registered.keys() != REGISTERED_FACTS:
            raise TypeError(
                f"from_registered takes {sorted(REGISTERED_FACTS)}, got {sorted(registered)}"
            )
        return cls(**{_REGISTERED_AS[key]: value for key, value in registered.items()})

    def to_registered(self) -> dict:
        """These facts in the site's field names, which ``from_registered`` reads back; the
        sizes a registered model lacks (vocabulary, FFN) are left out."""
        return {key: getattr(self, name) for key, name in _REGISTERED_AS.items()}

    def to_mapping(self) -> dict:
        """The JSON object ``from_mapping`` reads back as these very facts."""
        data = asdict(self)
        data.pop("extra")
        return data

    @classmethod
    def from_mapping(cls, data: dict) -> ModelFacts:
        """Reads the site's ModelFacts JSON (or a Hugging Face config.json's names)."""
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
        missing = {"parameters", "num_layers", "hidden_size", "num_attention_heads"} - set(values)
        if missing:
            raise ValueError(f"model spec: missing {', '.join(sorted(missing))}")
        return cls(**values, extra=extra)
