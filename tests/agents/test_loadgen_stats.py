"""Percentiles and summaries equal numpy's defaults (checked against the standard library)."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.loadgen.stats import percentile, summarize


def reference_percentiles(values: list[float]) -> list[float]:
    # statistics.quantiles(method="inclusive") is numpy's "linear" method, written by others.
    return statistics.quantiles(values, n=100, method="inclusive")


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=200))
def test_it_matches_the_reference_at_every_whole_percentile(values):
    ordered = sorted(values)
    for q, expected in enumerate(reference_percentiles(values), start=1):
        assert percentile(ordered, q) == pytest.approx(expected, rel=1e-9, abs=1e-6)


def test_it_interpolates_linearly_between_ranks():
    # numpy.percentile([1, 2, 3, 4], [0, 50, 90, 95, 99, 100]) → 1, 2.5, 3.7, 3.85, 3.97, 4
    ordered = [1.0, 2.0, 3.0, 4.0]
    got = [percentile(ordered, q) for q in (0, 50, 90, 95, 99, 100)]
    assert got == pytest.approx([1.0, 2.5, 3.7, 3.85, 3.97, 4.0])


def test_it_summarises_with_population_std_and_scale():
    rng = random.Random(3)
    values = [rng.random() for _ in range(101)]
    summary = summarize(values, scale=1000.0)
    scaled = [value * 1000 for value in values]
    assert summary["mean"] == pytest.approx(statistics.fmean(scaled))
    assert summary["median"] == pytest.approx(statistics.median(scaled))
    assert summary["std"] == pytest.approx(statistics.pstdev(scaled))
    quantiles = reference_percentiles(scaled)
    for q in (90, 95, 99):
        assert summary[f"p{q}"] == pytest.approx(quantiles[q - 1])


def test_it_reports_nothing_for_an_empty_sample_rather_than_zero():
    assert set(summarize([]).values()) == {None}


def test_a_single_value_is_every_percentile():
    assert summarize([0.5]) == {
        "mean": 0.5,
        "median": 0.5,
        "std": 0.0,
        "p90": 0.5,
        "p95": 0.5,
        "p99": 0.5,
    }


def test_it_refuses_bad_input():
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)
