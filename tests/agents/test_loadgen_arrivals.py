"""Open-loop arrivals: gamma gaps with the requested mean and burstiness."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from agents.loadgen.arrivals import arrival_offsets

SAMPLES = 20_000


def gaps(rate: float, burstiness: float, seed: int = 0) -> list[float]:
    offsets = list(
        itertools.islice(arrival_offsets(rate, burstiness, random.Random(seed)), SAMPLES)
    )
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize(("rate", "burstiness"), [(10.0, 1.0), (250.0, 0.5), (3.0, 4.0)])
def test_the_gaps_have_the_requested_mean_and_coefficient_of_variation(rate, burstiness):
    sample = gaps(rate, burstiness)
    mean = statistics.fmean(sample)
    cv = statistics.pstdev(sample) / mean
    # With 20 000 gaps the sampling error of the mean is cv/sqrt(n) < 1 % and that of the CV
    # about 1.5 % (burstiness 0.5 has the heaviest tail); 4 % leaves room, yet a wrong
    # shape or scale (e.g. rate and burstiness swapped) misses by far more.
    assert mean == pytest.approx(1 / rate, rel=0.04)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.04)


def test_the_first_request_goes_at_zero_and_the_schedule_is_seeded():
    first = list(itertools.islice(arrival_offsets(5.0, 1.0, random.Random(7)), 50))
    again = list(itertools.islice(arrival_offsets(5.0, 1.0, random.Random(7)), 50))
    other = list(itertools.islice(arrival_offsets(5.0, 1.0, random.Random(8)), 50))
    assert first[0] == 0.0
    assert first == again
    assert first != other
    assert first == sorted(first)


def test_an_infinite_rate_sends_everything_at_once():
    assert list(itertools.islice(arrival_offsets(math.inf, 1.0, random.Random(0)), 5)) == [0.0] * 5


@pytest.mark.parametrize(("rate", "burstiness"), [(0.0, 1.0), (-1.0, 1.0), (1.0, 0.0)])
def test_it_refuses_a_rate_or_burstiness_that_is_not_positive(rate, burstiness):
    with pytest.raises(ValueError, match="positive"):
        next(arrival_offsets(rate, burstiness, random.Random(0)))
