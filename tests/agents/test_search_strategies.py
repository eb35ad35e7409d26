"""Search strategies (issue 18): what each measures, what it spends, which configuration
wins — on scripted trials where every figure is known, and on the simulator as the world."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pytest

from agents.hardware import DEFAULT_EFFICIENCY, MODEL_PRESETS, Efficiency, gpu_profile
from agents.loadgen import BenchConfig, RandomPrompts
from agents.protocol import CapacitySearch, expand_serve_grid, parse_slos
from agents.search import Calibration, Outcome, SearchSpec, at_effort, run_search
from agents.search.simulated import SimulatedTrials

COLD_START_S = 60.0
RUN_S = 240.0
CALIBRATED = replace(DEFAULT_EFFICIENCY, bandwidth=0.5)


@dataclass
class Scripted:
    """Trials whose true values (what a full measurement finds) and predictions are given;
    a brief measurement sees the true value scaled by ``brief_bias`` per configuration."""

    true: list[float | None]
    predicted: list[float | None]
    calibrated: list[float | None] | None = None
    starts: list[bool] | None = None
    brief_bias: dict[int, float] = field(default_factory=dict)
    intervals: dict[int, tuple[float, float]] = field(default_factory=dict)
    measured: list[tuple[int, float]] = field(default_factory=list)
    predicted_with: list[Efficiency] = field(default_factory=list)

    def _starts(self, index: int) -> bool:
        return self.starts is None or self.starts[index]

    def predict(self, index: int, efficiency: Efficiency) -> Outcome:
        self.predicted_with.append(efficiency)
        table = self.calibrated if efficiency == CALIBRATED else self.predicted
        value = table[index] if self._starts(index) else None
        return Outcome(value, COLD_START_S + RUN_S, self._starts(index), simulated=True)

    def measure(self, index: int, effort: float) -> Outcome:
        self.measured.append((index, effort))
        value = self.true[index] if self._starts(index) else None
        if value is not None and effort < 1:
            value *= self.brief_bias.get(index, 1.0)
        low, high = self.intervals.get(index, (None, None))
        spent = COLD_START_S if not self._starts(index) else COLD_START_S + RUN_S * effort
        return Outcome(value, spent, self._starts(index), low, high)

    def calibrate(self, measured):
        if self.calibrated is None:
            return None
        return Calibration(
            CALIBRATED, points=len(measured) * 5, error_before_pct=30, error_after_pct=4
        )


CONFIGS = [{"max_num_seqs": n} for n in (8, 16, 32, 64, 128, 256)]


def test_exhaustive_measures_everything_and_the_best_measured_wins():
    trials = Scripted(true=[10, 50, 30, None, 45, 20], predicted=[0] * 6)
    result = run_search(SearchSpec("exhaustive"), CONFIGS, trials)
    assert [index for index, _ in trials.measured] == list(range(6))
    assert result.winner == 1 and result.fates[1].fate == "winner"
    assert result.spent_gpu_s == 5 * (COLD_START_S + RUN_S) + COLD_START_S + RUN_S
    assert trials.predicted_with == []  # exhaustive never asks the simulator


def test_prune_drops_what_cannot_start_serves_no_load_or_loses_by_the_margin():
    trials = Scripted(
        true=[40, 52, 48, 10, 30, 45],
        predicted=[40, 50, 46, None, 30, 44],
        starts=[True, True, True, True, True, False],
    )
    result = run_search(SearchSpec("prune", margin=0.25), CONFIGS, trials)
    # Best predicted 50: the survivors are within 25 % of it (≥ 37.5), best predicted first:
    # 1, 2, 0. Configuration 1 measures 52 (4 % above its prediction): 0, predicted 40, is
    # then 40 × 1.04 = 41.6, more than 10 % below 52, and is not measured.
    assert [index for index, _ in trials.measured] == [1, 2]
    fates = result.fates
    assert fates[0].fate == "pruned" and "below the best measured" in fates[0].reason
    assert fates[3].fate == "pruned" and "no load" in fates[3].reason
    assert fates[4].fate == "pruned" and "40 % below the best" in fates[4].reason
    assert fates[5].fate == "pruned" and "not to start" in fates[5].reason
    assert result.winner == 1
    assert result.spent_gpu_s == 2 * (COLD_START_S + RUN_S)


def test_prune_measures_one_of_configurations_predicted_the_same():
    trials = Scripted(true=[40, 50, 50, 50, 30, 20], predicted=[40, 48, 48, 48, 30, 20])
    result = run_search(SearchSpec("prune", margin=0.25), CONFIGS, trials)
    assert [index for index, _ in trials.measured] == [1]
    for twin in (2, 3):
        assert result.fates[twin].fate == "pruned"
        assert result.fates[twin].reason == "predicted the same as configuration 2"
    assert result.winner == 1


def test_prune_calibrates_after_two_trials_and_reranks_what_is_left():
    trials = Scripted(
        true=[40, 52, 48, 10, 58, 45],
        predicted=[40, 50, 46, 20, 30, 44],
        # The calibrated simulator sees configuration 4 as the best and 0 as hopeless.
        calibrated=[10, 51, 47, 20, 60, 46],
    )
    result = run_search(SearchSpec("prune", margin=0.25, calibrate_after=2), CONFIGS, trials)
    # 1 and 2 measured (52 and 48: the calibration predicts them closer than the defaults,
    # 51 and 47 against 50 and 46, so it is used); with it 4 (60) comes back and is measured
    # (58), after which 5 (46 × 1.04 ≈ 48) is more than 10 % below 58.
    assert [index for index, _ in trials.measured] == [1, 2, 4]
    assert result.calibration is not None and result.calibration.efficiency == CALIBRATED
    assert result.fates[4].calibrated == 60 and result.fates[4].fate == "winner"
    assert result.fates[0].fate == "pruned"
    assert result.fates[5].fate == "pruned" and "best measured" in result.fates[5].reason
    # Measured after the calibration: 4 (predicted 30, calibrated 60, true 58).
    uncalibrated = abs(30 / 58 - 1) * 100
    calibrated = abs(60 / 58 - 1) * 100
    assert result.error_uncalibrated_pct == pytest.approx(uncalibrated)
    assert result.error_calibrated_pct == pytest.approx(calibrated)


def test_a_spend_limit_is_never_knowingly_passed_and_a_prediction_never_wins():
    trials = Scripted(true=[10, 20, 30, 40, 50, 60], predicted=[60, 50, 40, 30, 20, 10])
    limit = 2.5 * (COLD_START_S + RUN_S)
    spec = SearchSpec("prune", margin=1.0, measured_margin=1.0, spend_limit_s=limit)
    result = run_search(spec, CONFIGS, trials)
    assert result.spent_gpu_s <= limit and result.measurements == 2
    assert result.stopped_by == "spend_limit"
    # Configuration 5 is the truly best, never measured: the winner is a measured one.
    assert result.winner == 1 and result.fates[5].fate != "winner"


def test_max_trials_counts_configurations_measured():
    trials = Scripted(true=[10, 20, 30, 40, 50, 60], predicted=[0] * 6)
    result = run_search(SearchSpec("exhaustive", max_trials=4), CONFIGS, trials)
    assert result.measurements == 4 and result.stopped_by == "max_trials"
    assert result.winner == 3


def test_halving_measures_all_briefly_keeps_the_best_third_and_measures_the_last_two_fully():
    trials = Scripted(
        true=[10, 50, 30, 20, 45, 40],
        predicted=[0] * 6,
        brief_bias={4: 1.2},  # a brief look overrates configuration 4
        intervals={1: (47.0, 53.0), 4: (40.0, 49.0)},
    )
    result = run_search(SearchSpec("halving", eta=3, min_effort=0.25), CONFIGS, trials)
    brief = [(index, effort) for index, effort in trials.measured if effort < 1]
    full = [index for index, effort in trials.measured if effort == 1]
    assert sorted(index for index, _ in brief) == list(range(6))
    assert {effort for _, effort in brief} == {1 / 3}
    assert sorted(full) == [1, 4]  # the best 2 of 6 after round 1
    for index in (0, 2, 3, 5):
        assert result.fates[index].fate == "eliminated" and result.fates[index].round == 1
    assert result.winner == 1
    # Their intervals overlap (47–53 and 40–49): within noise of each other.
    assert result.decided is False
    # Brief looks cost their cold starts in full.
    assert result.spent_gpu_s == pytest.approx(
        6 * (COLD_START_S + RUN_S / 3) + 2 * (COLD_START_S + RUN_S)
    )


def test_a_calibration_that_predicts_the_measured_worse_is_not_used():
    trials = Scripted(
        true=[40, 52, 48, 10, 58, 45],
        predicted=[40, 50, 46, 20, 30, 44],
        calibrated=[10, 70, 30, 20, 60, 46],  # far off on the two it was fitted to
    )
    result = run_search(SearchSpec("prune", calibrate_after=2), CONFIGS, trials)
    assert result.calibration is None and result.calibration_rejected is not None
    assert all(fate.calibrated is None for fate in result.fates)
    assert 4 not in [index for index, _ in trials.measured]


def test_prune_then_halving_runs_halving_on_the_survivors_only():
    trials = Scripted(true=[10, 50, 30, 20, 45, 40], predicted=[10, 50, 30, 20, 45, 40])
    result = run_search(SearchSpec("prune+halving", margin=0.25), CONFIGS, trials)
    assert {index for index, _ in trials.measured} == {1, 4, 5}
    assert result.winner == 1


def test_bayes_is_seeded_measures_each_configuration_once_and_keeps_to_max_trials():
    grid = expand_serve_grid(
        {"max_num_seqs": [8, 16, 32, 64], "max_num_batched_tokens": [512, 2048, 8192]}
    )
    true = [float(10 * i) for i in range(len(grid))]
    runs = []
    for _ in range(2):
        trials = Scripted(true=true, predicted=[0] * len(grid))
        result = run_search(SearchSpec("bayes", max_trials=6, seed=3), grid, trials)
        runs.append([index for index, _ in trials.measured])
        assert len(set(runs[-1])) == len(runs[-1]) == 6
        assert result.winner == max(runs[-1], key=lambda index: true[index])
    assert runs[0] == runs[1]


def test_a_brief_measurement_is_the_benchmark_at_a_fraction_of_its_effort():
    bench = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=RandomPrompts(256, 64),
        levels=({"concurrency": 4},),
        num_prompts=200,
        slos=parse_slos("tpot:p95<20ms"),
        capacity=CapacitySearch(max_probes=6, tolerance_pct=5.0),
    )
    assert at_effort(bench, 1.0) is bench
    quarter = at_effort(bench, 0.25)
    assert quarter.num_prompts == 50
    assert quarter.capacity.max_probes == 2 and quarter.capacity.tolerance_pct == 20.0
    assert quarter.capacity.repeat_bracket is False
    assert at_effort(bench, 0.01).num_prompts == 10
    with pytest.raises(ValueError, match="effort"):
        at_effort(bench, 0)


# -- the simulator as the world --------------------------------------------------------------


@pytest.mark.slow
def test_on_a_simulated_world_prune_calibrates_and_finds_the_exhaustive_winner_for_less():
    world = Efficiency(flops=0.5, bandwidth=0.7, step_overhead_s=0.002, per_sequence_s=40e-6)
    grid = expand_serve_grid({"max_num_seqs": [8, 32, 128], "max_num_batched_tokens": [512, 4096]})
    bench = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=RandomPrompts(1024, 128),
        levels=({"concurrency": 8},),
        num_prompts=30,
        steady_multiple=2.0,
        slos=parse_slos("ttft:p95<1000ms, tpot:p95<25ms"),
        capacity=CapacitySearch(max_probes=4),
        metrics_url=None,
    )
    trials = SimulatedTrials(
        MODEL_PRESETS["llama-3.1-8b"].facts, gpu_profile("H100"), grid, bench, world
    )
    exhaustive = run_search(SearchSpec("exhaustive"), grid, trials)
    # Wide margins: at least two configurations survive the screen and the first
    # measurement, so it calibrates.
    pruned = run_search(
        SearchSpec("prune", margin=0.5, measured_margin=0.3, calibrate_after=2), grid, trials
    )
    best = exhaustive.outcomes[exhaustive.winner].value
    assert pruned.outcomes[pruned.winner].value * 1.05 >= best
    assert pruned.spent_gpu_s < exhaustive.spent_gpu_s
    # The world is slower than the defaults say: calibrating to it fits the measured ITLs.
    calibration = pruned.calibration
    assert calibration is not None and calibration.points >= 6
    assert calibration.metrics["itl"].after_pct < calibration.metrics["itl"].before_pct / 2
    assert calibration.error_after_pct < calibration.error_before_pct
    assert all(o.simulated for o in exhaustive.outcomes.values())
    assert not math.isnan(exhaustive.spent_gpu_s)
