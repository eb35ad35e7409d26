"""How an experiment's runs search its grid (docs/search.md): the stored shape, its checks,
and the job's ``search`` it becomes when a run starts.

Guarantees:

- ``ExperimentSearch`` is the one stored shape (``Experiment.search``; ``{}`` is
  ``exhaustive`` without limits: every trial measured, as before searches existed). A spend
  limit is in GPU-minutes or in dollars, not both.
- ``search_check`` returns the search as it will be stored, or reports every problem by
  field (``search.strategy``, ``search.spend_limit_usd`` …): a strategy other than
  ``exhaustive`` ranks configurations by their throughput at capacity under the SLOs, so it
  needs SLOs and a capacity search; ``prune`` and ``prune+halving`` predict on the simulator,
  so they need its profile of the GPU; a limit in dollars needs a price of the GPU.
- ``job_search`` turns a stored search into the job's, in the pod's seconds: GPU-minutes over
  the GPU count, dollars at the pod's price when the run starts (frozen with the run).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Annotated, Literal

import pydantic
from pydantic import Field

from agents import protocol
from runs.errors import DomainValidationError

# A month of an 8-GPU pod: a limit beyond it is a typing error, not a plan.
MAX_GPU_MINUTES = 30 * 24 * 60 * 8
MAX_SPEND_USD = 10_000_000


class ExperimentSearch(protocol.StrictModel):
    """An experiment's search as stored (module docstring)."""

    strategy: Literal[protocol.SEARCH_STRATEGIES] = "exhaustive"  # type: ignore[valid-type]
    spend_limit_gpu_minutes: (
        Annotated[float, Field(gt=0, le=MAX_GPU_MINUTES, allow_inf_nan=False)] | None
    ) = None
    spend_limit_usd: Annotated[float, Field(gt=0, le=MAX_SPEND_USD, allow_inf_nan=False)] | None = (
        None
    )
    max_trials: Annotated[int, Field(ge=1, le=protocol.MAX_JOB_TRIALS)] | None = None
    margin: Annotated[float, Field(gt=0, lt=1, allow_inf_nan=False)] = 0.25

    @pydantic.model_validator(mode="after")
    def _one_spend_limit(self) -> ExperimentSearch:
        if self.spend_limit_gpu_minutes is not None and self.spend_limit_usd is not None:
            raise ValueError("give a spend limit in GPU-minutes or in dollars, not both")
        return self

    @property
    def searches(self) -> bool:
        """Whether runs measure less than every trial, or within a limit."""
        return self != ExperimentSearch()


# The strategies that predict on the simulator before they measure.
PREDICTING_STRATEGIES = frozenset({"prune", "prune+halving"})


def search_check(
    search: object,
    *,
    slos: protocol.Slos | None,
    workload: protocol.Workload | None,
    simulator_knows_gpu: bool,
    gpu_has_price: bool,
    add: Callable[[str, str], None],
) -> dict:
    """The search as it will be stored ({} when it is the default), problems reported to
    ``add(field, message)`` (module docstring)."""
    try:
        checked = ExperimentSearch.model_validate(search if search is not None else {})
    except pydantic.ValidationError as exc:
        for error in protocol.pydantic_field_errors(exc, prefix="search"):
            add(error.field, error.message)
        return {}
    if checked.strategy != "exhaustive":
        ranks = slos is not None and slos.given and workload is not None and workload.capacity
        if slos is not None and workload is not None and not ranks:
            add(
                "search.strategy",
                f"{checked.strategy} ranks configurations by their throughput at capacity "
                "under the SLOs: set SLOs and a capacity search (workload.capacity).",
            )
    if checked.strategy in PREDICTING_STRATEGIES and not simulator_knows_gpu:
        add(
            "search.strategy",
            f"{checked.strategy} predicts on the simulator, which has no profile of this GPU "
            "type: choose halving or bayes.",
        )
    if checked.spend_limit_usd is not None and not gpu_has_price:
        add(
            "search.spend_limit_usd",
            "There is no price for this GPU type to turn dollars into GPU time: give the "
            "limit in GPU-minutes.",
        )
    return checked.model_dump(mode="json", exclude_defaults=True) if checked.searches else {}


def job_search(
    stored: dict,
    *,
    gpu_count: int,
    price_usd_per_gpu_hour: Decimal | None,
    prior: protocol.SearchPrior | None = None,
) -> protocol.SearchSettings | None:
    """The job's search for a stored one (module docstring), its predictions starting from
    ``prior`` (an earlier calibration); None for the default. Raises
    ``DomainValidationError`` for a limit in dollars without a price."""
    search = ExperimentSearch.model_validate(stored or {})
    if not search.searches:
        return None
    seconds = None
    if search.spend_limit_gpu_minutes is not None:
        seconds = search.spend_limit_gpu_minutes * 60 / gpu_count
    elif search.spend_limit_usd is not None:
        if not price_usd_per_gpu_hour:
            raise DomainValidationError.single(
                "search.spend_limit_usd",
                "There is no price for this GPU type now to turn dollars into GPU time: "
                "give the limit in GPU-minutes.",
            )
        pod_usd_per_hour = float(price_usd_per_gpu_hour) * gpu_count
        seconds = search.spend_limit_usd * 3600 / pod_usd_per_hour
    if seconds is not None:
        seconds = min(seconds, protocol.MAX_SPEND_SECONDS)
    return protocol.SearchSettings(
        strategy=search.strategy,
        spend_limit_seconds=seconds,
        max_trials=search.max_trials,
        margin=search.margin,
        prior=prior,
    )
