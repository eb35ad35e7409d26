"""Model facts: what the memory maths and the roofline need to know about a model.

Guarantees:

- ``ModelFacts`` holds exactly the facts a registered Benchsite model carries (parameters,
  layers, hidden size, heads, KV heads, head dim, dtype, context), plus vocabulary and FFN
  sizes with stated defaults. ``ModelFacts.from_registered`` is the one translation from the
  site's (and the job's ``ModelSource``) field names, used by the site and the simulator
  alike, so both reason about the same model.
- Bytes per element: weights take their stored dtype (``WEIGHT_BYTES``); activations and
  the KV cache take the compute dtype (``ACTIVATION_BYTES``): quantized weights still compute
  and cache in 16 bit.
- ``load_model_facts`` reads a preset name or a JSON file with the site's field names.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

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


# The site's (and ModelSource's) names of what ``ModelFacts.from_registered`` takes.
REGISTERED_FACTS = frozenset(
    (
        "hf_repo",
        "parameter_count",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "num_kv_heads",
        "head_dim",
        "dtype",
        "max_context",
    )
)


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
    def from_registered(
        cls,
        *,
        hf_repo: str,
        parameter_count: int,
        num_layers: int,
        hidden_size: int,
        num_attention_heads: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: str,
        max_context: int,
    ) -> ModelFacts:
        """The facts of a model registered on the site (or sent in a job's ``ModelSource``)."""
        return cls(
            name=hf_repo,
            parameters=parameter_count,
            num_layers=num_layers,
            hidden_size=hidden_size,
            num_attention_heads=num_attention_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            dtype=dtype,
            max_position_embeddings=max_context,
        )

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


MODEL_PRESETS = {
    # Published architecture facts (the models' config.json on Hugging Face).
    "llama-3.1-8b": ModelFacts(
        "meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 32, 4096, 32, 8, 128, 128_256, 14_336, 131_072
    ),
    "llama-3.1-70b": ModelFacts(
        "meta-llama/Llama-3.1-70B-Instruct",
        70.6e9,
        80,
        8192,
        64,
        8,
        128,
        128_256,
        28_672,
        131_072,
    ),
    "llama-2-7b": ModelFacts(
        "meta-llama/Llama-2-7b-hf", 6.74e9, 32, 4096, 32, 32, 128, 32_000, 11_008, 4096
    ),
    "llama-2-13b": ModelFacts(
        "meta-llama/Llama-2-13b-hf", 13.0e9, 40, 5120, 40, 40, 128, 32_000, 13_824, 4096
    ),
    "mistral-7b": ModelFacts(
        "mistralai/Mistral-7B-Instruct-v0.3", 7.25e9, 32, 4096, 32, 8, 128, 32_768, 14_336, 32_768
    ),
    "qwen2.5-7b": ModelFacts(
        "Qwen/Qwen2.5-7B-Instruct", 7.62e9, 28, 3584, 28, 4, 128, 152_064, 18_944, 32_768
    ),
}


def load_model_facts(text: str) -> ModelFacts:
    """A preset name (``llama-3.1-8b``) or the path of a JSON file."""
    if text.lower() in MODEL_PRESETS:
        return MODEL_PRESETS[text.lower()]
    path = Path(text)
    if not path.is_file():
        raise ValueError(
            f"model spec {text!r} is neither a preset ({', '.join(MODEL_PRESETS)}) nor a file"
        )
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"model spec {text!r}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"model spec {text!r}: expected a JSON object")
    return ModelFacts.from_mapping(data)
