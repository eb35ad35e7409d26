"""Where a run's pod may go: the experiment's own GPU type and cloud first, then the
fallbacks the experiment allows.

Guarantees of ``placements``:
- the first placement is always the experiment's GPU type in its cloud;
- then the same GPU type in the other cloud (when ``allow_other_cloud``), then each fallback
  GPU type in the experiment's order, each in its cloud and then the other one — a run would
  rather keep its GPU than its cloud, because the GPU changes what is measured;
- no (GPU type, cloud) pair appears twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OTHER_CLOUD = {"secure": "community", "community": "secure"}
MAX_FALLBACK_GPU_TYPES = 4


@dataclass(frozen=True)
class Placement:
    gpu_type_id: str
    cloud_type: str  # the site's spelling: "secure" | "community"

    def __str__(self) -> str:
        return f"{self.gpu_type_id} ({self.cloud_type})"


def placements(
    *,
    gpu_type_id: str,
    cloud_type: str,
    fallback_gpu_types: Iterable[str] = (),
    allow_other_cloud: bool = False,
) -> list[Placement]:
    """Every placement a run may take, in order of preference (see the module docstring)."""
    ordered: list[Placement] = []
    for gpu in (gpu_type_id, *fallback_gpu_types):
        clouds = [cloud_type]
        if allow_other_cloud and cloud_type in OTHER_CLOUD:
            clouds.append(OTHER_CLOUD[cloud_type])
        for cloud in clouds:
            placement = Placement(gpu, cloud)
            if placement not in ordered:
                ordered.append(placement)
    return ordered


def experiment_placements(experiment) -> list[Placement]:
    """The placements an experiment (a model instance) allows."""
    return placements(
        gpu_type_id=experiment.gpu_type_id,
        cloud_type=experiment.cloud_type,
        fallback_gpu_types=experiment.fallback_gpu_types or (),
        allow_other_cloud=experiment.allow_other_cloud,
    )


def recorded_placement(run) -> Placement | None:
    """Where the run's pod was asked for (written before each create), if anywhere yet."""
    if not run.pod_gpu_type:
        return None
    return Placement(run.pod_gpu_type, run.pod_cloud_type)
