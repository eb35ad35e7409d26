"""Trials on the simulator alone: predictions from the search's own simulator, and
"measurements" from a simulator *world* whose constants differ — the ground truth of
``benchmarks/search_spend.py`` and of the strategies' tests, which the search cannot peek at.

Guarantees: both are deterministic and cached (the same configuration at the same effort,
or predicted with the same constants, is computed once); a measurement is labelled
simulated like every figure from the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agents.hardware import Efficiency, GpuProfile, ModelFacts
from agents.loadgen.config import BenchConfig
from agents.predict import predict_trial
from agents.search.calibration import Calibration, calibrate, level_points
from agents.search.effort import at_effort
from agents.search.outcomes import Outcome, outcome_of


class SimulatedTrials:
    """``Trials`` (``agents.search.strategies``) for ``configs`` of ``model`` on ``gpu`` under
    ``bench``, measured in the ``world``; ``predictions``: a cache to share with other
    worlds of the same model, GPU, configurations and benchmark."""

    def __init__(
        self,
        model: ModelFacts,
        gpu: GpuProfile,
        configs: Sequence[Mapping[str, object]],
        bench: BenchConfig,
        world: Efficiency,
        predictions: dict | None = None,
    ):
        self.model = model
        self.gpu = gpu
        self.configs = list(configs)
        self.bench = bench
        self.world = world
        # Shareable between worlds of the same model, GPU, grid and benchmark.
        self._predictions: dict[tuple[int, Efficiency], Outcome] = (
            predictions if predictions is not None else {}
        )
        self._measurements: dict[tuple[int, float], Outcome] = {}

    def _run(
        self, index: int, bench: BenchConfig, efficiency: Efficiency, *, intervals: bool
    ) -> Outcome:
        prediction = predict_trial(
            self.model,
            self.gpu,
            self.configs[index],
            bench,
            efficiency=efficiency,
            intervals=intervals,
        )
        return outcome_of(
            prediction.levels,
            prediction.capacity,
            gpu_seconds=prediction.gpu_seconds,
            starts=prediction.starts,
            simulated=True,
        )

    def predict(self, index: int, efficiency: Efficiency) -> Outcome:
        key = (index, efficiency)
        if key not in self._predictions:
            # A prediction ranks; it never declares a winner: no intervals needed.
            self._predictions[key] = self._run(index, self.bench, efficiency, intervals=False)
        return self._predictions[key]

    def measure(self, index: int, effort: float) -> Outcome:
        key = (index, effort)
        if key not in self._measurements:
            self._measurements[key] = self._run(
                index, at_effort(self.bench, effort), self.world, intervals=effort >= 1
            )
        return self._measurements[key]

    def calibrate(self, measured: Sequence[tuple[int, Outcome]]) -> Calibration | None:
        points = [
            point
            for index, outcome in measured
            for point in level_points(self.model, self.gpu, self.configs[index], outcome.levels)
        ]
        return calibrate(points)
