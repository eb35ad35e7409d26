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


# From each model's config.json on Hugging Face; parameters: the exact count of its weights.
# key, name, licence, repo, parameters, layers, hidden, heads, KV heads, FFN, vocabulary, context
_PUBLISHED = (
    ("llama-3.1-8b", "Llama 3.1 8B Instruct", "llama3.1", "meta-llama/Llama-3.1-8B-Instruct",
     8_030_261_248, 32, 4096, 32, 8, 14_336, 128_256, 131_072),
    ("llama-3.1-70b", "Llama 3.1 70B Instruct", "llama3.1", "meta-llama/Llama-3.1-70B-Instruct",
     70_553_706_496, 80, 8192, 64, 8, 28_672, 128_256, 131_072),
    ("llama-2-7b", "Llama 2 7B", "llama2", "meta-llama/Llama-2-7b-hf",
     6_738_415_616, 32, 4096, 32, 32, 11_008, 32_000, 4096),
    ("llama-2-13b", "Llama 2 13B", "llama2", "meta-llama/Llama-2-13b-hf",
     13_015_864_320, 40, 5120, 40, 40, 13_824, 32_000, 4096),
    ("mistral-7b", "Mistral 7B Instruct v0.3", "apache-2.0", "mistralai/Mistral-7B-Instruct-v0.3",
     7_248_023_552, 32, 4096, 32, 8, 14_336, 32_768, 32_768),
    ("qwen2.5-7b", "Qwen2.5 7B Instruct", "apache-2.0", "Qwen/Qwen2.5-7B-Instruct",
     7_615_616_512, 28, 3584, 28, 4, 18_944, 152_064, 32_768),
)  # fmt: skip  # a table


def _preset(name, licence, repo, parameters, layers, hidden, heads, kv_heads, ffn, vocab, context):
    facts = ModelFacts(
        name=repo,
        parameters=parameters,
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=hidden // heads,  # 128 for every one of them
        vocab_size=vocab,
        intermediate_size=ffn,
        max_position_embeddings=context,
    )
    return ModelPreset(name, licence, facts)


MODEL_PRESETS = {key: _preset(*published) for key, *published in _PUBLISHED}


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
