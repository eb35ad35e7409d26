"""The vLLM version the agent reports is the one its engines run, asked of that install."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from agents.runner.hostfacts import host_facts, vllm_version_of


def fake_venv(root: Path, version: str | None) -> Path:
    """A virtualenv's bin/ with a ``vllm`` and a ``python`` that knows (or lacks) vLLM."""
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "vllm").write_text("#!/bin/sh\n")
    body = f"print({version!r})" if version else "raise SystemExit('No package metadata for vllm')"
    python = bin_dir / "python"
    python.write_text(f"#!{sys.executable}\n{body}\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return bin_dir / "vllm"


def test_it_asks_the_python_beside_a_virtualenvs_vllm(tmp_path):
    assert vllm_version_of((str(fake_venv(tmp_path / "a", "0.32.0+cpu")), "serve")) == "0.32.0+cpu"
    assert vllm_version_of((str(fake_venv(tmp_path / "b", None)), "serve")) is None


def test_it_reports_no_version_for_the_simulator_and_never_the_jobs_promise():
    facts = host_facts(vllm_version=None)
    assert facts.vllm_version is None
    assert host_facts(vllm_version="0.11.0").vllm_version == "0.11.0"
