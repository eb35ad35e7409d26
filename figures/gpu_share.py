"""The GPUs a trial uses out of its pod's, and so what its cost per token is priced for.

Guarantee: one rule for the site (``runs.costs``, its pages and answer) and the CLI's gate
(``benchsite_cli.gate``), so a cost compared across GPU counts is priced the same way
wherever it is computed. Pure: no site, no HTTP, no money type (``rate_for`` keeps its
caller's: a ``Decimal`` rate stays one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeVar

Rate = TypeVar("Rate", float, Decimal)

# The serve flags whose product is the number of GPUs one vLLM server uses.
PARALLEL_SIZE_FLAGS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


@dataclass(frozen=True)
class GpuShare:
    """The GPUs a trial uses out of its pod's: what its cost per token is priced for.

    The rule (docs/costs.md, "Parallelism"): a trial is priced at the pod's rate × ``used`` ÷
    ``pod``. The GPUs it leaves idle could serve other replicas of it, so their cost is not
    its cost; and a TP=1 trial priced so costs what N/TP data-parallel replicas on the whole
    pod would, if they scaled linearly, without claiming that unmeasured scaling.
    """

    used: int
    pod: int

    def __post_init__(self) -> None:
        for name in ("used", "pod"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} GPUs must be a whole number ≥ 1, not {value!r}")
        if self.used > self.pod:
            raise ValueError(f"a trial cannot use {self.used} GPUs of a {self.pod}-GPU pod")

    @classmethod
    def of(cls, serve_config: Mapping[str, Any] | None, *, pod_gpus: int) -> GpuShare:
        """The share of a trial whose vLLM configuration is ``serve_config`` (tensor ×
        pipeline × data parallel sizes, each 1 when not set) on a ``pod_gpus``-GPU pod. A
        product above the pod's GPUs (a grid checked against another GPU count) is capped at
        the pod: the trial cannot have used more than it had."""
        used = 1
        for name in PARALLEL_SIZE_FLAGS:
            size = (serve_config or {}).get(name)
            if size is not None:
                used *= int(size)
        return cls(used=min(max(used, 1), pod_gpus), pod=pod_gpus)

    def rate_for(self, pod_rate: Rate) -> Rate:
        """The pod's rate × ``used`` ÷ ``pod``: what the trial's GPUs cost per hour, in the
        pod rate's own type and unrounded (a step on the way to a cost per token)."""
        return pod_rate * self.used / self.pod

    @property
    def whole_pod(self) -> bool:
        return self.used == self.pod

    def describe(self) -> str:
        """How the cost is priced, in words for a page: "priced for 1 of 4 GPUs"."""
        if self.pod == 1:
            return "priced for its 1 GPU"
        if self.whole_pod:
            return f"priced for all {self.pod} GPUs"
        return f"priced for {self.used} of {self.pod} GPUs"
