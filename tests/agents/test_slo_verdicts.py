"""Verdicts with a stated confidence (issue 31): an objective is met, missed or too close to
call from how many requests were beyond its target and how many were measured; a window is
long enough for the percentile judged; a level too close to call is measured again, its
counts pooled, up to ``max_extensions``; the capacity is what is confidently met."""

from __future__ import annotations

import pytest

from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen.capacity import CapacityPlanner, load_verdict
from agents.loadgen.config import BenchConfig
from agents.loadgen.prompts import RandomPrompts
from agents.predict import OFFLINE_URL, predict_trial
from agents.protocol import CapacitySearch, Slos, Workload, level_requests, steady_window_requests
from agents.protocol.slo_verdicts import (
    MET,
    MISSED,
    TOO_CLOSE,
    allowed_share,
    check_verdict,
    objective_verdict,
    requests_to_judge,
    span_counts,
)

P99 = allowed_share(percentile=99)


@pytest.mark.parametrize(
    "beyond, judged, verdict",
    [
        (1, 64, TOO_CLOSE),  # the p99 over 64 requests: its slowest one
        (0, 64, TOO_CLOSE),  # none beyond, but 64 cannot show a 1 % tail is under 1 %
        (0, 298, TOO_CLOSE),
        (0, 299, MET),
        (1, 500, MET),
        (3, 300, TOO_CLOSE),
        (8, 300, MISSED),
        (2, 2, MISSED),
    ],
)
def test_a_p99_objective_is_judged_by_its_counts(beyond, judged, verdict):
    assert objective_verdict(beyond, judged, P99) == verdict


def test_misses_in_one_clump_are_too_close_to_call():
    # 8 of 300 beyond a p99 target reads "missed" when each request is independent; eight
    # of one wave that waited behind one prefill are one event, which a longer run may not
    # repeat (the demo's c=28 missed in 300 requests and met in 1,500).
    clumped = [True] * 8 + [False] * 292
    spread = ([True] + [False] * 36) * 8 + [False] * 4
    assert sum(clumped) == sum(spread) == 8 and len(clumped) == len(spread) == 300
    assert objective_verdict(8, 300, P99) == MISSED
    assert objective_verdict(8, 300, P99, spans=span_counts(spread)) == MISSED
    assert objective_verdict(8, 300, P99, spans=span_counts(clumped)) == TOO_CLOSE
    # None beyond: spans agree with the count alone; too few requests for spans: none.
    assert objective_verdict(0, 299, P99, spans=span_counts([False] * 299)) == MET
    assert span_counts([True] * 9) == [] and len(span_counts([False] * 300)) == 10
    # Pooled measurements pool their spans: the clump stays one among twenty spans.
    check = {"target": 500, "percentile": 99, "value": 100.0, "met": False}
    clump = check | {"judged": 300, "beyond": 8, "spans": span_counts(clumped)}
    quiet = check | {"judged": 300, "beyond": 0, "spans": span_counts([False] * 300)}
    level = {"concurrency": 8, "completed": 300, "failed": 0}
    assert load_verdict([level | {"slo": {"ttft_ms": clump}}]) == TOO_CLOSE
    assert load_verdict([level | {"slo": {"ttft_ms": c}} for c in (clump, quiet)]) == TOO_CLOSE


def test_the_confidence_sets_how_sure_a_verdict_must_be():
    assert objective_verdict(0, 100, P99, confidence_pct=60) == MET
    assert objective_verdict(0, 100, P99, confidence_pct=95) == TOO_CLOSE
    assert requests_to_judge(99) == 299 and requests_to_judge(99, 60) == 92
    assert (requests_to_judge(95), requests_to_judge(90), requests_to_judge(50)) == (59, 29, 5)


def test_a_window_is_long_enough_for_the_percentile_it_judges():
    p99 = Slos(ttft_ms=500, tpot_ms=50)
    assert steady_window_requests(64, 2.0, 8, p99) == 299
    assert steady_window_requests(64, 2.0, 8, Slos(ttft_ms=500, ttft_percentile=90)) == 64
    assert steady_window_requests(64, 2.0, 200, p99) == 400
    assert Slos(ttft_ms=500, min_attainment_pct=99.5).requests_to_judge() == 598
    workload = Workload.model_validate(
        {"dataset": {"kind": "random", "input_len": 8, "output_len": 4}, "concurrency": [8]}
    )
    # What estimates count: the window the SLOs need, ramp, drain and warm-up.
    assert level_requests(workload, {"concurrency": 8}, p99) == 299 + 16
    assert level_requests(workload, {"concurrency": 8}) == 200 + 16


def _level(beyond: int, judged: int) -> dict:
    check = {"target": 500, "percentile": 99, "value": 100.0, "met": False}
    check |= {"judged": judged, "beyond": beyond, "verdict": objective_verdict(beyond, judged, P99)}
    return {"concurrency": 8, "completed": judged, "failed": 0, "slo": {"ttft_ms": check}}


def test_a_load_measured_several_times_pools_its_counts():
    assert load_verdict([_level(0, 150)]) == TOO_CLOSE
    assert load_verdict([_level(0, 150), _level(0, 150)]) == MET  # 300 with none beyond
    assert load_verdict([_level(5, 150), _level(5, 150)]) == MISSED
    failed = _level(0, 150) | {"failed": 1}
    assert load_verdict([failed, _level(0, 400)]) == MISSED
    # A result stored before verdicts is judged on its point estimate, as it was.
    assert check_verdict({"target": 500, "percentile": 99, "value": 480.0, "met": True}) == MET
    assert check_verdict({"target": 500, "percentile": 99, "value": 520.0, "met": False}) == MISSED
    assert check_verdict({"target": 95, "value": 97.0, "met": True}) == MET


def test_a_probe_too_close_to_call_is_measured_again_before_the_search_moves_on():
    planner = CapacityPlanner(CapacitySearch(max_probes=4), max_extensions=2)
    planner.record(_level(0, 400))  # c=8 met
    assert planner.next_load() == 16
    planner.record(_level(0, 150) | {"concurrency": 16}, probe=True)
    assert planner.next_load() == 16  # too close: again, not a new probe
    planner.record(_level(0, 150) | {"concurrency": 16}, probe=True)
    assert planner.loads[16.0].verdict == MET
    assert planner.next_load() == 32
    assert planner.probes == 1 and planner.extensions[16.0] == 1  # one load probed


def test_past_a_too_close_end_the_search_looks_for_the_first_load_missed():
    # Up to 24 met; 24–63 only too close to call (a tail that 300 requests cannot place);
    # 64 and above missed. The capacity is 24; the truth lies anywhere below the first miss.
    def measured(load: float) -> dict:
        beyond = 0 if load <= 24 else (3 if load < 64 else 20)
        return _level(beyond, 300) | {"concurrency": load}

    planner = CapacityPlanner(CapacitySearch(max_probes=12, repeat_bracket=False))
    for fixed in (8, 25):
        planner.record(measured(fixed))
    probed = []
    while (load := planner.next_load()) is not None:
        probed.append(load)
        planner.record(measured(load), probe=True)
    outcome = planner.outcome()
    assert (outcome["capacity"], outcome["bracket_high"]) == (24, 25)
    assert outcome["bracket_high_verdict"] == TOO_CLOSE
    # Above the bracket: doubling until a miss, then bisecting towards it, within 5 %.
    above = [load for load in probed if load > 25]
    assert above[:2] == [50, 100], probed
    missed = outcome["first_missed"]
    assert 64 <= missed <= 64 * 1.05, probed
    assert max(load for load in above if load < 64) >= missed / 1.05, probed
    assert outcome["probes"] == len(probed) <= 12


def test_without_probes_left_the_first_missed_is_what_was_measured():
    planner = CapacityPlanner(CapacitySearch(max_probes=1, repeat_bracket=False))
    planner.record(_level(0, 300) | {"concurrency": 8})
    planner.record(_level(3, 300) | {"concurrency": 16})
    planner.record(_level(20, 300) | {"concurrency": 64})
    assert planner.next_load() == 12  # the bracket first
    planner.record(_level(3, 300) | {"concurrency": 12}, probe=True)
    assert planner.next_load() is None
    outcome = planner.outcome()
    assert (outcome["capacity"], outcome["bracket_high"], outcome["first_missed"]) == (8, 12, 64)


def _bench(**overrides) -> BenchConfig:
    settings = {
        "base_url": OFFLINE_URL,
        "model": "m",
        "source": RandomPrompts(64, 16),
        "levels": ({"concurrency": 4},),
        "num_prompts": 100,
        "metrics_url": None,
        "slos": Slos(ttft_ms=60_000),  # met by every request: only the count can decide
        "max_extensions": 2,
    } | overrides
    return BenchConfig(**settings)


def _predict(config: BenchConfig) -> list[dict]:
    model = MODEL_PRESETS["llama-3.1-8b"].facts
    return predict_trial(model, gpu_profile("H100"), {}, config, intervals=False).levels


def test_a_level_too_close_to_call_is_measured_longer_until_it_is_decided():
    # 100 requests (a classic level, no steady window) cannot show a p99 met; 200 pooled
    # cannot either; 300 can: the level runs three times, the last two as extensions.
    levels = _predict(_bench())
    assert [level.get("extension") for level in levels] == [None, 1, 2]
    assert [level["slo"]["ttft_ms"]["verdict"] for level in levels] == [TOO_CLOSE] * 3
    assert load_verdict(levels) == MET
    # Up to the cap: with one extension the load stays too close (not met).
    capped = _predict(_bench(max_extensions=1))
    assert len(capped) == 2 and load_verdict(capped) == TOO_CLOSE
    # A steady window holds what the percentile needs from the start: no extension.
    steady = _predict(_bench(steady_multiple=2.0))
    assert len(steady) == 1 and steady[0]["completed"] >= 299
    assert steady[0]["slo"]["ttft_ms"]["verdict"] == MET
