"""Capacity at the SLOs: the highest load (concurrency, or request rate) at which every
objective holds, found with as few extra levels as possible.

Guarantees:

- A load *passes* when its measurements completed requests, none failed, none was cut
  short and every objective is confidently met (``load_verdict``): each objective's counts
  pooled over every measurement of the load, judged at the SLOs' confidence
  (``agents.protocol.slo_verdicts``), never on one percentile's point value.
- A probe too close to call is measured again (its counts pooled, as if one longer window),
  up to ``max_extensions`` times, before the search moves on; still too close, it counts as
  not met (the capacity is what is confidently met).
- The bracket is ``[last pass, first fail]``: the highest confidently met load below the
  lowest one that is not (a pass above a fail is noise, not capacity); the outcome says
  whether that end was missed or too close to call. Every level already measured counts,
  the experiment's fixed levels too.
- The true capacity lies below ``first_missed``, the lowest load above the capacity that
  was confidently missed: where the bracket's high end is only too close to call, the
  probes left after the bracket has converged go above it (doubling without a missed load,
  else bisecting towards it) until a missed load lies within the tolerance of the highest
  one that was not. The capacity's uncertainty runs from the capacity to ``first_missed``.
- Without a bracket the search doubles from the highest pass (or starts at 1) and halves
  from the lowest fail; with one it probes where a monotone (PCHIP) interpolation of the SLO
  margin crosses 1, as vLLM's ``serve_sla`` does, kept inside the bracket's middle 80 % so
  that every probe narrows it; it bisects instead when the margin cannot be interpolated, or
  when the last two probes moved the same end of the bracket (an interpolation that keeps
  landing on one side — a margin that jumps, as an attainment does — would creep). It
  stops when the bracket is within ``tolerance_pct`` (one user apart for concurrency), at
  ``max_load``, below the lowest load, or after ``max_probes`` probes; then, with
  ``repeat_bracket``, each end is measured once more (those two are not counted in
  ``max_probes``) and the search goes on if a repeat overturned an end.
- ``outcome`` reports the capacity, the bracket, the probes used, why it stopped and the
  figures measured at capacity (the mean of its measurements).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from agents.protocol import CapacitySearch
from agents.protocol.slo_verdicts import MET, MISSED, TOO_CLOSE, Verdict, load_verdict

# Interpolating with a margin of infinity (a level whose requests failed) says nothing
# about where it crosses 1: such points are capped at this margin.
MAX_INTERPOLATED_MARGIN = 4.0
# A probe lies at least this share of the bracket away from its ends.
PROBE_INSET = 0.1
# Where an open-loop search without any measured level starts (requests per second).
FIRST_RATE = 1.0


def slo_margin(result: Mapping) -> float:
    """How far a level is from its SLOs: the largest measured/target ratio of its latency
    objectives (for the attainment, the share of requests missing against the share allowed
    to), so that ≤ 1 meets every objective; infinity for a level that cannot pass (failed
    or no requests, cut short, an objective without a value)."""
    if result.get("partial") or (result.get("failed") or 0) > 0 or not result.get("completed"):
        return math.inf
    margin = 0.0
    for name, check in (result.get("slo") or {}).items():
        value, target = check.get("value"), check.get("target")
        if value is None or not target:
            return math.inf
        if name == "attainment":
            allowed = 100.0 - target
            missing = 100.0 - value
            ratio = missing / allowed if allowed > 0 else (0.0 if missing <= 0 else math.inf)
        else:
            ratio = value / target
        margin = max(margin, ratio)
        if check.get("met") is False:
            margin = max(margin, math.nextafter(1.0, math.inf))
    return margin


def level_passes(result: Mapping) -> bool:
    """Whether one level alone confidently meets every objective."""
    return load_verdict([result]) == MET


@dataclass
class _Load:
    results: list[Mapping]

    @property
    def verdict(self) -> Verdict:
        return load_verdict(self.results)

    @property
    def passes(self) -> bool:
        return self.verdict == MET

    @property
    def margin(self) -> float:
        return max(slo_margin(result) for result in self.results)


class CapacityPlanner:
    """Decides the next load to measure from the levels measured so far (``record``)."""

    def __init__(self, search: CapacitySearch, *, max_extensions: int = 0):
        """``max_extensions``: how often a probe too close to call is measured again."""
        self.search = search
        self.max_extensions = max_extensions
        self.extensions: Counter[float] = Counter()
        self.last_probe: float | None = None
        self.axis = search.axis
        self.loads: dict[float, _Load] = defaultdict(lambda: _Load([]))
        self.probes = 0
        self.repeated: set[float] = set()
        self.stop_reason: str | None = None
        # Which end of the bracket each probe moved ("low": it passed, "high": it failed).
        self.moves: list[str] = []

    # -- what was measured -----------------------------------------------------------------

    def load_of(self, result: Mapping) -> float | None:
        """The load of a level result on this search's axis (None: another kind of level,
        or an unbounded rate)."""
        value = result.get(self.axis)
        if value is None or value == "inf":
            return None
        return float(value)

    def record(self, result: Mapping, *, probe: bool = False) -> None:
        """One measured level; ``probe``: the search asked for it."""
        load = self.load_of(result)
        if load is None:
            return
        if probe:
            if load in self.loads:
                self.repeated.add(load)
            else:
                self.probes += 1
        self.loads[load].results.append(result)
        if probe:
            self.last_probe = load
            self.moves.append("low" if self.loads[load].passes else "high")

    def bracket(self) -> tuple[float | None, float | None]:
        """``(last pass, first fail)`` as the module docstring defines them."""
        fails = [load for load, measured in self.loads.items() if not measured.passes]
        first_fail = min(fails, default=None)
        passes = [
            load
            for load, measured in self.loads.items()
            if measured.passes and (first_fail is None or load < first_fail)
        ]
        return max(passes, default=None), first_fail

    # -- what to measure next --------------------------------------------------------------

    def _integral(self) -> bool:
        return self.axis == "concurrency"

    def _lowest(self) -> float:
        return 1.0 if self._integral() else 0.001

    def _highest(self) -> float:
        if self.search.max_load is not None:
            return self.search.max_load
        return 16_384.0 if self._integral() else 10_000.0

    def _narrow_enough(self, low: float, high: float) -> bool:
        if self._integral() and high - low <= 1:
            return True
        return (high - low) / low * 100.0 <= self.search.tolerance_pct

    def _round(self, load: float) -> float:
        return float(round(load)) if self._integral() else float(f"{load:.4g}")

    def next_load(self) -> float | None:
        """The next load to measure, or None when the search is over (``stop_reason``); a
        probe too close to call first, again, while it has extensions left."""
        last = self.last_probe
        if (
            last is not None
            and self.loads[last].verdict == TOO_CLOSE
            and self.extensions[last] < self.max_extensions
        ):
            self.extensions[last] += 1
            return last
        low, high = self.bracket()
        exhausted = self.probes >= self.search.max_probes
        if low is not None and high is not None and self._narrow_enough(low, high):
            above = None if exhausted else self._toward_first_missed(low)
            return above if above is not None else self._repeat(low, high, "converged")
        if exhausted:
            return self._repeat(low, high, "probes_exhausted")
        if low is None and high is None:
            return FIRST_RATE if not self._integral() else 1.0
        if high is None:
            if low >= self._highest():
                return self._repeat(low, high, "max_load")
            return min(self._round(low * 2), self._highest())
        if low is None:
            if high <= self._lowest():
                return self._finish("below_lowest")
            half = self._round(high / 2)
            return half if half < high else self._finish("below_lowest")
        return self._between(low, high)

    def first_missed(self) -> float | None:
        """The lowest load above the capacity that was confidently missed (module docstring)."""
        low, _ = self.bracket()
        missed = [
            load
            for load, measured in self.loads.items()
            if measured.verdict == MISSED and (low is None or load > low)
        ]
        return min(missed, default=None)

    def _toward_first_missed(self, low: float) -> float | None:
        """A probe above a bracket whose high end was too close to call, or None when a
        missed load lies within the tolerance of the highest load below it not missed."""
        missed = self.first_missed()
        # Above the capacity and below the first miss: each met (noise) or too close.
        below = [load for load in self.loads if load > low and (missed is None or load < missed)]
        if not below:
            return None
        top = max(below)
        if missed is None:
            return min(self._round(top * 2), self._highest()) if top < self._highest() else None
        if self._narrow_enough(top, missed):
            return None
        probe = self._round((top + missed) / 2)
        if self._integral():
            probe = min(max(probe, top + 1), missed - 1)
        return probe

    def _repeat(self, low: float | None, high: float | None, reason: str) -> float | None:
        if self.search.repeat_bracket:
            for end in (low, high):
                if end is not None and end not in self.repeated:
                    return end
        return self._finish(reason)

    def _finish(self, reason: str) -> None:
        self.stop_reason = reason
        return None

    def _between(self, low: float, high: float) -> float:
        """A probe inside ``(low, high)``: where the interpolated margin crosses 1."""
        inset = PROBE_INSET * (high - low)
        creeping = len(self.moves) >= 2 and self.moves[-1] == self.moves[-2]
        guess = None if creeping else self._crossing(low, high)
        if guess is None:
            guess = (low + high) / 2
        guess = min(max(guess, low + inset), high - inset)
        probe = self._round(guess)
        if self._integral():
            probe = min(max(probe, low + 1), high - 1)
        return probe

    def _crossing(self, low: float, high: float) -> float | None:
        # SciPy's PCHIP keeps the margin monotone between measured loads (no overshoot),
        # so its crossing of 1 is a safe guess; imported here, as only searches need it.
        from scipy.interpolate import PchipInterpolator
        from scipy.optimize import brentq

        points = sorted(
            (load, min(measured.margin, MAX_INTERPOLATED_MARGIN))
            for load, measured in self.loads.items()
        )
        if len(points) < 2:
            return None
        loads = [load for load, _ in points]
        margins = [margin - 1.0 for _, margin in points]
        curve = PchipInterpolator(loads, margins)
        at_low, at_high = float(curve(low)), float(curve(high))
        if not (at_low <= 0 < at_high):
            return None
        return float(brentq(lambda load: float(curve(load)), low, high))

    # -- the answer ------------------------------------------------------------------------

    def outcome(self) -> dict:
        """The search's result as ``agents.protocol.CapacityResult`` JSON."""
        low, high = self.bracket()
        at_capacity = self.loads[low].results if low is not None else []

        def mean_of(key: str) -> float | None:
            values = [r.get(key) for r in at_capacity if isinstance(r.get(key), int | float)]
            return sum(values) / len(values) if values else None

        return {
            "axis": self.axis,
            "capacity": low,
            "bracket_low": low,
            "bracket_high": high,
            # Whether the bracket's high end was missed, or only not confidently met.
            "bracket_high_verdict": None if high is None else self.loads[high].verdict,
            "first_missed": self.first_missed(),
            "probes": self.probes,
            "repeats": len(self.repeated),
            "levels_measured": sum(len(m.results) for m in self.loads.values()),
            "stop_reason": self.stop_reason or "stopped",
            "output_throughput": mean_of("output_throughput"),
            "request_throughput": mean_of("request_throughput"),
            "request_goodput": mean_of("request_goodput"),
        }
