"""When open-loop requests are sent: gamma-distributed gaps, as ``vllm bench serve``.

Guarantees: the first request is sent at offset 0; gaps have mean ``1/rate`` and shape
``burstiness`` (1 is a Poisson process, below 1 burstier, above 1 more regular: the
coefficient of variation is ``1/sqrt(burstiness)``); rate ``inf`` sends everything at 0.
Deterministic for a given ``random.Random``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator


def arrival_offsets(rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Endless send times in seconds from the level's start."""
    if rate <= 0 or burstiness <= 0 or math.isnan(rate) or math.isnan(burstiness):
        raise ValueError("rate and burstiness must be positive")
    offset = 0.0
    if math.isinf(rate):
        while True:
            yield offset
    # Gamma(shape=k, scale=θ) has mean kθ: θ = 1/(rate·k) gives mean gap 1/rate.
    scale = 1.0 / (rate * burstiness)
    while True:
        yield offset
        offset += rng.gammavariate(burstiness, scale)
