"""Which vLLM a run really ran, against the one its image tag names.

Guarantee: ``vllm_version_mismatch`` compares the release the agent found installed (its
``hello``) with the release of the frozen image tag (``runs.experiment_spec``), ignoring local
suffixes such as ``+cpu``; it says nothing when either is unknown (a tag such as ``latest``, an
agent that could not tell, the simulator).
"""

from __future__ import annotations

from agents.protocol import parse_vllm_version
from runs.frozen_job import run_engine
from runs.models import Run


def vllm_version_mismatch(run: Run) -> str:
    """A sentence naming both versions when they differ, else ""."""
    engine = run_engine(run)
    expected = engine.vllm_version
    installed = (run.agent_info or {}).get("vllm_version")
    if engine.kind != "vllm" or not expected or not installed:
        return ""
    try:
        same = parse_vllm_version(expected)[:3] == parse_vllm_version(installed)[:3]
    except ValueError:
        return ""
    if same:
        return ""
    return (
        f"The image tag {engine.image_tag} names vLLM {expected}, but the pod ran vLLM "
        f"{installed}: these figures are {installed}'s."
    )
