"""Which vLLM a run really ran, against the one its image tag names.

Guarantee: ``vllm_version_mismatch`` compares, for each pod of the run (a run over several
image tags has one per tag; one lost and replaced counts too), the release the agent found
installed (its ``hello``) with the release its image tag names (``runs.experiment_spec``),
ignoring local suffixes such as ``+cpu``; it says nothing of a pod where either is unknown (a
tag such as ``latest``, an agent that could not tell, the simulator).
"""

from __future__ import annotations

from agents.protocol import parse_vllm_version
from runs.experiment_spec import vllm_version_of_tag
from runs.models import Run
from runs.run_as_started import run_engine


def _mismatch(tag: str | None, installed: str | None) -> str:
    expected = vllm_version_of_tag(tag or "")
    if not expected or not installed:
        return ""
    try:
        same = parse_vllm_version(expected)[:3] == parse_vllm_version(installed)[:3]
    except ValueError:
        return ""
    if same:
        return ""
    return (
        f"The image tag {tag} names vLLM {expected}, but the pod ran vLLM {installed}: "
        f"these figures are {installed}'s."
    )


def vllm_version_mismatch(run: Run) -> str:
    """A sentence per pod naming both versions where they differ, else ""."""
    engine = run_engine(run)
    if engine.kind != "vllm":
        return ""
    pods = [(pod.get("image_tag"), pod.get("vllm_version")) for pod in run.pod_history or []]
    pods.append((run.pod_image_tag or engine.image_tag, (run.agent_info or {}).get("vllm_version")))
    return " ".join(dict.fromkeys(filter(None, (_mismatch(*pod) for pod in pods))))
