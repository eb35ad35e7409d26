"""The one small interface every provider implements, and its errors.

Guarantees every provider keeps:
- Pods are named ``bench-<run uuid>`` (``pod_name``; a run resumed on its n-th replacement
  pod: ``bench-<run uuid>-r<n>``); ``find_by_name`` is asked before any ``create``, so a
  retried or duplicated provision never rents a second pod for one attempt.
- The job reaches the pod as ONE environment value (``BENCHSITE_JOB``, base64 JSON) and the
  run token as another (``BENCHSITE_TOKEN``); nothing of either is interpolated into a query,
  logged, or put into an error message.
- Failures are classified: ``TransientProviderError`` (no capacity, rate limits, 5xx, HTML
  bodies, timeouts: retry with backoff, maybe another GPU type) or
  ``PermanentProviderError`` (bad key, invalid request: the run fails with the reason).
- Returned facts are normalised into ``PodInfo`` whatever the provider's own shapes are.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

POD_NAME_PREFIX = "bench-"


_ATTEMPT_SUFFIX = re.compile(r"-r([1-9][0-9]{0,2})$")


def pod_name(run_id, attempt: int = 0) -> str:
    """The idempotency name of a run's pod: its first, or the one after ``attempt`` earlier
    pods (a resume after a lost pod, or the move to the run's next image tag)."""
    return f"{POD_NAME_PREFIX}{run_id}" + (f"-r{attempt}" if attempt else "")


def run_id_of_pod(name: str) -> str | None:
    """The run id a pod name carries (whichever attempt it is), or None for a pod that is
    not ours."""
    if not name.startswith(POD_NAME_PREFIX):
        return None
    return _ATTEMPT_SUFFIX.sub("", name[len(POD_NAME_PREFIX) :]) or None


class PodState(enum.StrEnum):
    PENDING = "pending"  # created, container not running yet
    RUNNING = "running"  # container runs (not the same as the agent being ready)
    EXITED = "exited"  # stopped or finished; may still bill storage
    TERMINATED = "terminated"  # gone


@dataclass(frozen=True)
class PodSpec:
    """What to rent for one run."""

    name: str
    image: str
    gpu_type_id: str
    gpu_count: int
    cloud_type: str  # "SECURE" | "COMMUNITY" | "ALL"
    env: dict[str, str] = field(repr=False)  # holds the job and the run token
    container_disk_gb: int = 40
    volume_gb: int = 0
    network_volume_id: str | None = None
    ports: str = ""


@dataclass(frozen=True)
class PodInfo:
    """A pod as the provider reports it, normalised."""

    pod_id: str
    name: str
    state: PodState
    cost_per_hr: Decimal | None = None  # the billed rate, when the provider says
    gpu_type_id: str | None = None
    gpu_count: int | None = None
    created_at: float | None = None  # Unix seconds, when known
    raw_status: str = ""


class ProviderError(RuntimeError):
    """A provider call failed; the message is safe to show (no secrets)."""


class TransientProviderError(ProviderError):
    """Worth retrying later (capacity, rate limit, 5xx, timeout)."""

    def __init__(self, message: str, *, no_capacity: bool = False):
        super().__init__(message)
        self.no_capacity = no_capacity


class PermanentProviderError(ProviderError):
    """Retrying will not help (authentication, validation); the run fails with the reason."""


class Provider(Protocol):
    """One organization's view of one provider (its own key, never another's)."""

    name: str

    def find_by_name(self, name: str) -> PodInfo | None: ...

    def create(self, spec: PodSpec) -> PodInfo: ...

    def status(self, pod_id: str) -> PodInfo | None:
        """``None`` when the pod does not exist (any more)."""
        ...

    def terminate(self, pod_id: str) -> None:
        """Idempotent: terminating a pod that is gone is not an error."""
        ...

    def list_bench_pods(self) -> list[PodInfo]:
        """Every pod of this account whose name starts with ``bench-`` (for reaping)."""
        ...

    def price(self, gpu_type_id: str, cloud_type: str) -> Decimal | None:
        """USD per GPU-hour now, when the provider publishes it."""
        ...
