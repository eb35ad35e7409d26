"""The simulator's own, seeded variability: what makes two runs on real GPUs differ, so that a
simulated re-run differs as a real one would, and never because of the host computing it.

Three parts (docs/simulator.md, "Noise", says where each size comes from):

- **the pod's speed** — one factor per engine start, drawn from a log-normal of median 1:
  GPUs of one SKU, clocks and fresh kernel state differ from pod to pod;
- **step jitter** — each engine step's duration times a log-normal factor of mean 1;
- **stalls** — a pause added to a step (a garbage collection, a busy host thread), arriving
  as a Poisson process in simulated time, at most one per step.

Guarantees: a ``StepNoise`` is a pure function of its seed and the calls made to it: the same
seed and the same steps give the same durations on any machine, whatever its load; it reads
no clock. ``NO_NOISE`` leaves every step as the model computed it.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass

from agents.hardware import POD_SPEED_SPREAD


@dataclass(frozen=True)
class NoiseModel:
    """The sizes of the three parts (module docstring); all zero: no noise."""

    pod_sigma: float = POD_SPEED_SPREAD  # log-normal sigma of the pod's speed factor
    step_sigma: float = 0.03  # log-normal sigma of one step's duration factor
    stalls_per_second: float = 0.2  # of simulated time
    stall_median_s: float = 0.05
    stall_sigma: float = 0.6  # log-normal sigma of a stall's duration

    @property
    def silent(self) -> bool:
        return not (self.pod_sigma or self.step_sigma or self.stalls_per_second)


DEFAULT_NOISE = NoiseModel()
NO_NOISE = NoiseModel(pod_sigma=0.0, step_sigma=0.0, stalls_per_second=0.0)


class StepNoise:
    """One engine's noise (module docstring), drawn from ``seed``."""

    def __init__(self, seed: int, model: NoiseModel = DEFAULT_NOISE):
        self.model = model
        self._rng = random.Random(seed)  # noqa: S311 (a simulation, not cryptography)
        self.pod_factor = math.exp(self._rng.gauss(0.0, model.pod_sigma))
        self._next_stall = self._stall_gap(0.0)
        self.stalls = 0
        self.stalled_seconds = 0.0

    def _stall_gap(self, now: float) -> float:
        rate = self.model.stalls_per_second
        return now + self._rng.expovariate(rate) if rate > 0 else math.inf

    def duration(self, start: float, seconds: float) -> float:
        """The duration of a step that starts at ``start`` (simulated s) and that the step
        model priced at ``seconds``."""
        model = self.model
        sigma = model.step_sigma
        # exp(N(-sigma²/2, sigma)) has mean 1: jitter spreads steps without slowing them.
        jitter = math.exp(self._rng.gauss(-sigma * sigma / 2, sigma)) if sigma else 1.0
        result = seconds * self.pod_factor * jitter
        if start >= self._next_stall:
            stall = model.stall_median_s * math.exp(self._rng.gauss(0.0, model.stall_sigma))
            result += stall
            self.stalls += 1
            self.stalled_seconds += stall
            self._next_stall = self._stall_gap(start)
        return result


def derived_seed(seed: int, *parts: object) -> int:
    """A seed of 63 bits for one use of ``seed`` named by ``parts`` (JSON values: a trial's
    serve configuration, say), so that each use draws its own numbers, the same ones on
    every machine (Python's ``hash`` differs between processes)."""
    text = json.dumps([seed, *parts], sort_keys=True, separators=(",", ":"), default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") >> 1
