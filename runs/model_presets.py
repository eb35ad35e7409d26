"""Architecture facts of well-known models, from their published config.json files.

Used to seed the demo, by tests and benchmarks, and (later) offered by the UI as presets so
a team registers a popular model without copying numbers by hand.
"""

from __future__ import annotations

MODEL_PRESETS: dict[str, dict] = {
    "llama-3.1-8b-instruct": dict(
        name="Llama 3.1 8B Instruct",
        hf_repo="meta-llama/Llama-3.1-8B-Instruct",
        parameter_count=8_030_261_248,
        num_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_kv_heads=8,
        head_dim=128,
        dtype="bfloat16",
        max_context=131_072,
        licence="llama3.1",
    ),
    "qwen2.5-7b-instruct": dict(
        name="Qwen2.5 7B Instruct",
        hf_repo="Qwen/Qwen2.5-7B-Instruct",
        parameter_count=7_615_616_512,
        num_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_kv_heads=4,
        head_dim=128,
        dtype="bfloat16",
        max_context=32_768,
        licence="apache-2.0",
    ),
    "llama-3.1-70b-instruct": dict(
        name="Llama 3.1 70B Instruct",
        hf_repo="meta-llama/Llama-3.1-70B-Instruct",
        parameter_count=70_553_706_496,
        num_layers=80,
        hidden_size=8192,
        num_attention_heads=64,
        num_kv_heads=8,
        head_dim=128,
        dtype="bfloat16",
        max_context=131_072,
        licence="llama3.1",
    ),
}
