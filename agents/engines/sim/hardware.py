"""GPU profiles and model facts: the inputs of the simulator's memory and step-time model.

Guarantees:

- Every GPU profile names its datasheet. Figures are the vendor's *dense* (no sparsity)
  BF16 tensor throughput, peak memory bandwidth and memory size per GPU.
- ``ModelSpec`` holds exactly the facts the memory maths needs, the ones a Benchsite
  ModelSpec registers (parameters, layers, hidden size, heads, KV heads, head dim, dtype),
  and is read from a preset name or a JSON file with the site's field names.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from pathlib import Path

GIB = 1024**3


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model. ``link_gbps`` is the per-GPU bandwidth between GPUs for tensor
    parallelism (NVLink where the board has it, else PCIe)."""

    name: str
    runpod_id: str
    bf16_tflops: float
    bandwidth_tbps: float
    memory_gb: float
    link_gbps: float
    source: str
    aliases: tuple[str, ...] = ()

    @property
    def memory_bytes(self) -> float:
        return self.memory_gb * 1e9


GPUS = (
    GpuProfile(
        "H100 SXM",
        "NVIDIA H100 80GB HBM3",
        989.0,
        3.35,
        80,
        450,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column: BF16 1,979 TFLOPS with "
        "sparsity, 3.35 TB/s, 80 GB, NVLink 900 GB/s)",
        ("h100", "h100-sxm", "h100sxm"),
    ),
    GpuProfile(
        "H200",
        "NVIDIA H200",
        989.0,
        4.8,
        141,
        450,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: BF16 1,979 TFLOPS with sparsity, "
        "4.8 TB/s, 141 GB, NVLink 900 GB/s)",
        ("h200", "h200-sxm"),
    ),
    GpuProfile(
        "B200",
        "NVIDIA B200",
        2250.0,
        8.0,
        180,
        900,
        "NVIDIA HGX B200 datasheet (8 GPUs: FP16/BF16 36 PFLOPS with sparsity, 1.4 TB HBM3e, "
        "64 TB/s; per GPU 2.25 PFLOPS dense, 180 GB, 8 TB/s; NVLink 1.8 TB/s)",
        ("b200",),
    ),
    GpuProfile(
        "A100 80GB",
        "NVIDIA A100-SXM4-80GB",
        312.0,
        2.039,
        80,
        300,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: BF16 312 TFLOPS dense, "
        "2,039 GB/s, NVLink 600 GB/s)",
        ("a100", "a100-80gb", "a100-sxm"),
    ),
    GpuProfile(
        "A100 40GB",
        "NVIDIA A100-SXM4-40GB",
        312.0,
        1.555,
        40,
        300,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM: BF16 312 TFLOPS dense, "
        "1,555 GB/s, NVLink 600 GB/s)",
        ("a100-40gb", "a100-sxm4-40gb"),
    ),
    GpuProfile(
        "L40S",
        "NVIDIA L40S",
        362.05,
        0.864,
        48,
        32,
        "NVIDIA L40S datasheet (BF16 362.05 TFLOPS dense / 733 with sparsity, 48 GB GDDR6, "
        "864 GB/s, PCIe Gen4 x16 64 GB/s both directions)",
        ("l40s",),
    ),
    GpuProfile(
        "RTX 4090",
        "NVIDIA GeForce RTX 4090",
        165.2,
        1.008,
        24,
        32,
        "NVIDIA Ada GPU architecture whitepaper, Appendix A (RTX 4090: BF16 with FP32 "
        "accumulate 165.2 TFLOPS dense, 24 GB GDDR6X, 1,008 GB/s; PCIe Gen4)",
        ("4090", "rtx4090", "rtx-4090"),
    ),
)


def gpu_profile(name: str) -> GpuProfile:
    """Finds a profile by name, alias or Runpod id, ignoring case and spaces."""

    def key(text: str) -> str:
        return text.lower().replace(" ", "").replace("_", "-")

    wanted = key(name)
    for gpu in GPUS:
        if wanted in {key(gpu.name), key(gpu.runpod_id), *(key(a) for a in gpu.aliases)}:
            return gpu
    known = ", ".join(gpu.name for gpu in GPUS)
    raise ValueError(f"unknown GPU {name!r}; known: {known}")


DTYPE_BYTES = {
    "bfloat16": 2.0,
    "float16": 2.0,
    "half": 2.0,
    "auto": 2.0,
    "float32": 4.0,
    "float": 4.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
    "awq": 0.5,
    "gptq": 0.5,
}


@dataclass(frozen=True)
class ModelSpec:
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
        if self.dtype not in DTYPE_BYTES:
            problems.append(f"dtype {self.dtype!r} is not one of {sorted(DTYPE_BYTES)}")
        if problems:
            raise ValueError(f"model spec {self.name!r}: " + "; ".join(problems))

    @property
    def weight_bytes(self) -> float:
        return self.parameters * DTYPE_BYTES[self.dtype]

    @property
    def ffn_size(self) -> int:
        # Llama-style SwiGLU models use about 3.5x the hidden size when not told.
        return self.intermediate_size or math.ceil(3.5 * self.hidden_size)

    @classmethod
    def from_mapping(cls, data: dict) -> ModelSpec:
        """Reads the site's ModelSpec JSON (or a Hugging Face config.json's names)."""
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
    "llama-3.1-8b": ModelSpec(
        "meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 32, 4096, 32, 8, 128, 128_256, 14_336, 131_072
    ),
    "llama-3.1-70b": ModelSpec(
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
    "llama-2-7b": ModelSpec(
        "meta-llama/Llama-2-7b-hf", 6.74e9, 32, 4096, 32, 32, 128, 32_000, 11_008, 4096
    ),
    "llama-2-13b": ModelSpec(
        "meta-llama/Llama-2-13b-hf", 13.0e9, 40, 5120, 40, 40, 128, 32_000, 13_824, 4096
    ),
    "mistral-7b": ModelSpec(
        "mistralai/Mistral-7B-Instruct-v0.3", 7.25e9, 32, 4096, 32, 8, 128, 32_768, 14_336, 32_768
    ),
    "qwen2.5-7b": ModelSpec(
        "Qwen/Qwen2.5-7B-Instruct", 7.62e9, 28, 3584, 28, 4, 128, 152_064, 18_944, 32_768
    ),
}


def load_model_spec(text: str) -> ModelSpec:
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
    return ModelSpec.from_mapping(data)
