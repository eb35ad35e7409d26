"""Model presets: well-known models, the one list of them that the simulator and the site use.

Guarantees:

- Each preset's facts are those of the model's published config.json on Hugging Face, with
  the exact parameter count of its weights; ``name`` and ``licence`` are what the site
  registers it with, and ``registered`` is the whole preset in the site's field names.
- ``load_model_facts`` reads a preset's key (``llama-3.1-8b``) or a JSON file with the site's
  (or a Hugging Face config.json's) field names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agents.hardware.models import ModelFacts


@dataclass(frozen=True)
class ModelPreset:
    """A well-known model: the name a team knows it by, its licence and its facts."""

    name: str
    licence: str
    facts: ModelFacts

    @property
    def registered(self) -> dict:
        """The fields a model registered from this preset gets (``ModelSpec``'s names)."""
        return {"name": self.name, **self.facts.to_registered(), "licence": self.licence}


MODEL_PRESETS = {
    "llama-3.1-8b": ModelPreset(
        "Llama 3.1 8B Instruct",
        "llama3.1",
        ModelFacts(
            name="meta-llama/Llama-3.1-8B-Instruct",
            parameters=8_030_261_248,
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=8,
            head_dim=128,
            vocab_size=128_256,
            intermediate_size=14_336,
            max_position_embeddings=131_072,
        ),
    ),
    "llama-3.1-70b": ModelPreset(
        "Llama 3.1 70B Instruct",
        "llama3.1",
        ModelFacts(
            name="meta-llama/Llama-3.1-70B-Instruct",
            parameters=70_553_706_496,
            num_layers=80,
            hidden_size=8192,
            num_attention_heads=64,
            num_kv_heads=8,
            head_dim=128,
            vocab_size=128_256,
            intermediate_size=28_672,
            max_position_embeddings=131_072,
        ),
    ),
    "llama-2-7b": ModelPreset(
        "Llama 2 7B",
        "llama2",
        ModelFacts(
            name="meta-llama/Llama-2-7b-hf",
            parameters=6_738_415_616,
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=32,
            head_dim=128,
            vocab_size=32_000,
            intermediate_size=11_008,
            max_position_embeddings=4096,
        ),
    ),
    "llama-2-13b": ModelPreset(
        "Llama 2 13B",
        "llama2",
        ModelFacts(
            name="meta-llama/Llama-2-13b-hf",
            parameters=13_015_864_320,
            num_layers=40,
            hidden_size=5120,
            num_attention_heads=40,
            num_kv_heads=40,
            head_dim=128,
            vocab_size=32_000,
            intermediate_size=13_824,
            max_position_embeddings=4096,
        ),
    ),
    "mistral-7b": ModelPreset(
        "Mistral 7B Instruct v0.3",
        "apache-2.0",
        ModelFacts(
            name="mistralai/Mistral-7B-Instruct-v0.3",
            parameters=7_248_023_552,
            num_layers=32,
            hidden_size=4096,
            num_attention_heads=32,
            num_kv_heads=8,
            head_dim=128,
            vocab_size=32_768,
            intermediate_size=14_336,
            max_position_embeddings=32_768,
        ),
    ),
    "qwen2.5-7b": ModelPreset(
        "Qwen2.5 7B Instruct",
        "apache-2.0",
        ModelFacts(
            name="Qwen/Qwen2.5-7B-Instruct",
            parameters=7_615_616_512,
            num_layers=28,
            hidden_size=3584,
            num_attention_heads=28,
            num_kv_heads=4,
            head_dim=128,
            vocab_size=152_064,
            intermediate_size=18_944,
            max_position_embeddings=32_768,
        ),
    ),
}


def load_model_facts(text: str) -> ModelFacts:
    """A preset's key (``llama-3.1-8b``) or the path of a JSON file."""
    if text.lower() in MODEL_PRESETS:
        return MODEL_PRESETS[text.lower()].facts
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
