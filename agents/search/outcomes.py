"""What a search knows about one configuration: a prediction or a measurement, read the same
way from the benchmark's results.

Guarantees:

- A configuration's *value* is its output throughput (tokens/s) at its capacity under the
  SLOs: on one GPU type the configuration with the highest value has the lowest cost per
  token at the SLOs. None when it does not start or no load met the SLOs (it cannot serve
  the team's traffic at all).
- ``outcome_of`` reads a trial's levels and capacity as ``bench --json`` and the agent's
  ``trial_finished`` carry them: the same reading for a prediction and a measurement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Outcome:
    """One configuration predicted or measured: its value (module docstring), the 95 %
    interval of that value where the levels gave one, the GPU seconds it took (its cold
    start and its levels), and the levels themselves (calibration reads them)."""

    value: float | None
    gpu_seconds: float
    starts: bool = True
    low: float | None = None
    high: float | None = None
    levels: Sequence[Mapping] = field(default_factory=tuple)
    simulated: bool = False
    load: float | None = None  # the capacity itself: users or requests per second

    @property
    def serves(self) -> bool:
        """It started and met the SLOs at some load."""
        return self.starts and self.value is not None


def outcome_of(
    levels: Sequence[Mapping],
    capacity: Mapping | None,
    *,
    gpu_seconds: float,
    starts: bool = True,
    simulated: bool = False,
) -> Outcome:
    """The outcome of a trial whose levels and capacity search are given (module docstring);
    the interval is the output-throughput interval of the level measured at capacity."""
    if not starts or capacity is None or capacity.get("capacity") is None:
        return Outcome(None, gpu_seconds, starts, levels=tuple(levels), simulated=simulated)
    load = capacity["capacity"]
    axis = capacity["axis"]
    at_capacity = [level for level in levels if level.get(axis) == load]
    low = high = None
    intervals = [
        level["ci95"]["output_throughput"]
        for level in at_capacity
        if (level.get("ci95") or {}).get("output_throughput")
    ]
    if intervals:
        low = min(interval["low"] for interval in intervals)
        high = max(interval["high"] for interval in intervals)
    return Outcome(
        capacity.get("output_throughput"),
        gpu_seconds,
        starts,
        low,
        high,
        tuple(levels),
        simulated,
        load,
    )
