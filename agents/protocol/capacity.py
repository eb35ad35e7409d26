"""``CapacityResult``: what a trial's capacity search found (``TrialFinished.capacity``)."""

from __future__ import annotations

from typing import Literal

from agents.protocol.fields import FiniteFloat
from agents.protocol.level_result import AsSent, Integer

CAPACITY_STOP_REASONS = (
    "converged",  # the bracket is within the tolerance
    "probes_exhausted",  # max_probes were spent first
    "max_load",  # every load up to max_load met the SLOs
    "below_lowest",  # even the lowest load (one user, the lowest rate) missed them
    "stopped",  # the trial ended first (cancel, deadline, engine death)
)


class CapacityResult(AsSent):
    """The highest load (``axis``: concurrency or request rate) at which every SLO held, with
    the bracket it was found in (``bracket_low`` = the last confident pass = ``capacity``;
    ``bracket_high``: the lowest load not confidently met, None when there was none, and
    ``bracket_high_verdict`` whether it was missed or too close to call; ``first_missed``: the
    lowest load above the capacity confidently missed, below which the true capacity lies,
    None when none was), the probes and repeats it took, why it stopped, and the throughputs
    measured at capacity (steady window; the mean of its measurements). ``capacity`` is None
    when no load met the SLOs. Simulated trials report throughputs in the modelled hardware's
    time, as their levels do."""

    axis: Literal["concurrency", "request_rate"]
    capacity: FiniteFloat | None = None
    bracket_low: FiniteFloat | None = None
    bracket_high: FiniteFloat | None = None
    # The high end's verdict: missed, or too close to call (not confidently met).
    bracket_high_verdict: Literal["met", "missed", "too_close"] | None = None
    first_missed: FiniteFloat | None = None
    probes: Integer
    repeats: Integer = 0
    levels_measured: Integer = 0
    stop_reason: Literal[CAPACITY_STOP_REASONS]  # type: ignore[valid-type]
    output_throughput: FiniteFloat | None = None
    request_throughput: FiniteFloat | None = None
    request_goodput: FiniteFloat | None = None
