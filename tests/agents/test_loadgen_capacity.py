"""The capacity search against loads whose SLO margin is known: it brackets, narrows, repeats
the bracket's ends and reports the highest load that met every objective."""

from __future__ import annotations

import math

import pytest

from agents.loadgen.capacity import CapacityPlanner, level_passes, slo_margin
from agents.protocol import CapacitySearch


def level(load: float, margin: float, *, axis: str = "concurrency", failed: int = 0) -> dict:
    """A level result whose only objective sits at ``margin`` × its 100 ms target."""
    return {
        axis: load,
        "completed": 10,
        "failed": failed,
        "output_throughput": 10.0 * load if load != "inf" else 1000.0,
        "slo": {"ttft_ms": {"target": 100.0, "value": 100.0 * margin, "met": margin <= 1}},
    }


def search(truth, planner: CapacityPlanner, *, noise=lambda load, count: 0.0) -> list[float]:
    """Runs the planner against ``truth(load)`` (the margin); the loads it probed."""
    probed: list[float] = []
    while (load := planner.next_load()) is not None:
        probed.append(load)
        margin = truth(load) + noise(load, probed.count(load))
        planner.record(level(load, margin, axis=planner.axis), probe=True)
        assert len(probed) < 40, "the search does not end"
    return probed


@pytest.mark.parametrize("true_capacity", [3, 17, 45, 130, 700])
def test_it_finds_a_concurrency_capacity_within_the_tolerance(true_capacity):
    # The margin grows with load and crosses 1 at the true capacity (plus a bit).
    def truth(load):
        return (load / (true_capacity + 0.5)) ** 1.5

    planner = CapacityPlanner(CapacitySearch(max_probes=12, tolerance_pct=5))
    for fixed in (1, 8, 64, 192):
        planner.record(level(fixed, truth(fixed)))
    search(truth, planner)
    outcome = planner.outcome()
    assert outcome["capacity"] is not None
    assert outcome["capacity"] <= true_capacity  # the capacity passed
    assert outcome["capacity"] >= true_capacity * 0.95 - 1
    low, high = outcome["bracket_low"], outcome["bracket_high"]
    assert low == outcome["capacity"] and (high is None or high > low)
    assert outcome["probes"] <= 12 and outcome["repeats"] <= 2


def test_it_brackets_from_the_fixed_levels_and_probes_only_inside():
    def truth(load):
        return load / 40

    planner = CapacityPlanner(CapacitySearch(max_probes=6, repeat_bracket=False))
    for fixed in (1, 8, 64, 192):
        planner.record(level(fixed, truth(fixed)))
    assert planner.bracket() == (8, 64)
    probed = search(truth, planner)
    assert all(8 < load < 64 for load in probed)
    assert planner.outcome()["capacity"] == 40


def test_it_doubles_from_one_without_levels_and_stops_at_the_maximum():
    planner = CapacityPlanner(CapacitySearch(max_probes=10, max_load=16, repeat_bracket=False))
    probed = search(lambda load: 0.5, planner)
    assert probed == [1, 2, 4, 8, 16]
    assert planner.outcome() | {"capacity": 16, "bracket_high": None, "stop_reason": "max_load"}


def test_even_one_user_missing_the_slos_has_no_capacity():
    planner = CapacityPlanner(CapacitySearch(repeat_bracket=False))
    planner.record(level(8, 3.0))
    probed = search(lambda load: 3.0, planner)
    assert probed == [4, 2, 1]
    outcome = planner.outcome()
    assert (outcome["capacity"], outcome["bracket_high"], outcome["stop_reason"]) == (
        None,
        1,
        "below_lowest",
    )


def test_the_bracket_ends_are_measured_again_and_a_failed_repeat_lowers_the_capacity():
    # 31 passes once, then misses: a flaky pass is not capacity.
    def noise(load, count):
        return 0.2 if load == 31 and count > 1 else 0.0

    planner = CapacityPlanner(CapacitySearch(max_probes=8, tolerance_pct=1))
    for fixed in (16, 64):
        planner.record(level(fixed, fixed / 31))
    probed = search(lambda load: load / 31, planner, noise=noise)
    assert probed.count(31) == 2  # measured, then repeated
    outcome = planner.outcome()
    assert outcome["capacity"] == 30 and outcome["bracket_high"] == 31
    assert outcome["repeats"] >= 2


def test_probes_are_limited():
    planner = CapacityPlanner(CapacitySearch(max_probes=2, repeat_bracket=False))
    probed = search(lambda load: load / 1000, planner)
    assert len(probed) == 2
    assert planner.outcome()["stop_reason"] == "probes_exhausted"


def test_a_rate_search_works_in_requests_per_second():
    planner = CapacityPlanner(CapacitySearch(axis="request_rate", max_probes=12))
    planner.record(level(2.0, 0.2, axis="request_rate"))
    planner.record(level("inf", 9.0, axis="request_rate"))  # ignored: no finite load
    search(lambda rate: rate / 7.3, planner)
    outcome = planner.outcome()
    assert outcome["axis"] == "request_rate"
    assert 7.3 * 0.95 <= outcome["capacity"] <= 7.3


def test_a_level_with_failed_requests_or_cut_short_never_passes():
    assert level_passes(level(4, 0.5))
    assert not level_passes(level(4, 0.5, failed=1))
    assert not level_passes(level(4, 0.5) | {"partial": True})
    assert slo_margin(level(4, 0.5) | {"completed": 0}) == math.inf


def test_the_attainment_margin_compares_misses_with_what_is_allowed():
    result = level(4, 0.5)
    result["slo"]["attainment"] = {"target": 95.0, "value": 97.5, "met": True}
    assert slo_margin(result) == pytest.approx(0.5)  # 2.5 % missed of 5 % allowed
    result["slo"]["attainment"] = {"target": 95.0, "value": 90.0, "met": False}
    assert slo_margin(result) == pytest.approx(2.0)
    assert not level_passes(result)


def test_a_margin_that_jumps_is_bisected_instead_of_crept_towards():
    # Attainment-like: every request identical, so the margin is smooth below the edge (48)
    # and jumps far above 1 just past it; interpolating towards a capped jump crept up by
    # the inset (17, 25, 33, 37, 40, 42) and ran out of probes.
    def truth(load):
        return 0.02 * load if load <= 48 else 20.0

    planner = CapacityPlanner(CapacitySearch(max_probes=6, tolerance_pct=5))
    for fixed in (1, 8, 64, 192):
        planner.record(level(fixed, truth(fixed)))
    search(truth, planner)
    outcome = planner.outcome()
    assert outcome["capacity"] >= 48 * 0.95 and outcome["capacity"] <= 48
    assert outcome["probes"] <= 6
