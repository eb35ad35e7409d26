"""Which vLLM, CUDA and NVIDIA driver a run's pods ran, and whether an experiment's image
can run on the driver the catalogue knows for its GPU type.

Guarantees:

- ``run_stacks`` lists each pod of a run (those it left, then its current one) as the
  ``(vLLM, CUDA, driver)`` its agent reported in its ``hello``, each distinct triple once, in
  order; a pod that reported none of them is left out (the simulator, an endpoint).
- ``experiment_driver_warnings`` says, for each image of a real-vLLM experiment whose CUDA
  an earlier run of the organization reported, whether the GPU type's last reported driver
  (``GpuType.driver_version``) is too old for it, by ``agents.protocol.cuda_driver``'s table
  (NVIDIA's minimum Linux driver per CUDA release); nothing when either fact is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.protocol import cuda_driver_problem, minimum_driver
from runs.experiment_spec import experiment_image_tags
from runs.models import Run
from runs.models.experiments import Engine

# How many of the organization's latest runs are searched for an image's reported CUDA.
_RUNS_SEARCHED = 200


@dataclass(frozen=True)
class SoftwareStack:
    """What one pod ran: vLLM, the image's CUDA and the pod's NVIDIA driver (None: unknown)."""

    vllm_version: str | None
    image_cuda_version: str | None
    driver_version: str | None

    def __str__(self) -> str:
        return " · ".join(
            f"{label} {value or '?'}"
            for label, value in (
                ("vLLM", self.vllm_version),
                ("CUDA", self.image_cuda_version),
                ("driver", self.driver_version),
            )
        )


def _stack(facts: dict) -> SoftwareStack | None:
    stack = SoftwareStack(
        facts.get("vllm_version"), facts.get("image_cuda_version"), facts.get("driver_version")
    )
    return stack if any(vars(stack).values()) else None


def run_stacks(run: Run) -> list[SoftwareStack]:
    """Each distinct stack the run's pods reported, in pod order (see module docstring)."""
    pods = [*(run.pod_history or []), run.agent_info or {}]
    return list(dict.fromkeys(stack for pod in pods if (stack := _stack(pod)) is not None))


def _reported_cuda(org_id, image_tag: str) -> str | None:
    """The image CUDA the organization's latest run on ``image_tag`` reported, or None."""
    runs = (
        Run.objects.filter(organization_id=org_id, agent_info__image_cuda_version__isnull=False)
        .order_by("-created_at")
        .values_list("pod_image_tag", "job_spec__engine__image_tag", "agent_info")[:_RUNS_SEARCHED]
    )
    for pod_tag, job_tag, info in runs:
        if (pod_tag or job_tag) == image_tag and info.get("image_cuda_version"):
            return info["image_cuda_version"]
    return None


def experiment_driver_warnings(experiment) -> list[str]:
    """A sentence per image of ``experiment`` whose reported CUDA the GPU type's last reported
    driver cannot run (see module docstring); [] when none, or nothing is known."""
    gpu = experiment.gpu_type
    if experiment.engine != Engine.VLLM or not gpu.driver_version:
        return []
    warnings = []
    for tag in filter(None, experiment_image_tags(experiment)):
        cuda = _reported_cuda(experiment.organization_id, tag)
        if cuda_driver_problem(image_cuda=cuda, driver=gpu.driver_version) is None:
            continue
        seen = f" on {gpu.driver_seen_at:%Y-%m-%d}" if gpu.driver_seen_at else ""
        warnings.append(
            f"Image {tag} runs CUDA {cuda} (as an earlier run reported), which needs NVIDIA "
            f"driver {minimum_driver(cuda)} or newer; the last {gpu.display_name} pod reported "
            f"driver {gpu.driver_version}{seen}: on such a pod its trials fail as "
            "cuda_driver_too_old (NVIDIA's minimum driver per CUDA release)."
        )
    return warnings
