"""A change between two figures, its interval and its words (``figures.deltas``): the one
formula the site's history and comparison pages and the CLI's regression gate share."""

from __future__ import annotations

import math

import pytest

from figures import deltas

# (new, base, new interval, base interval, higher is better) → (verdict, words)
EDGES = [
    (
        (8.0, 8.0, (8.0, math.inf), (8.0, 12.0), True),
        ("within noise", "within noise (CI −33–+∞ %)"),
    ),
    ((5.0, 0.0, (4.0, 6.0), (0.0, 0.0), True), ("better", "better by ∞ % (CI ∞–∞ %)")),
    ((0.0, 0.0, (0.0, 0.0), (0.0, 0.0), True), ("within noise", "within noise (CI −100–+∞ %)")),
    ((112.0, 100.0, None, (99.0, 101.0), False), ("worse", "worse by 12 % (no interval)")),
    ((100.0, 100.0, None, None, True), ("same", "unchanged (no interval)")),
    # Not an interval (low above high; a negative figure): the point decides.
    ((10.0, 9.0, (11.0, 9.0), (8.0, 10.0), True), ("better", "better by 11 % (no interval)")),
    ((10.0, 9.0, (-1.0, 12.0), (8.0, 10.0), True), ("better", "better by 11 % (no interval)")),
]


def _delta(new, base, new_ci, base_ci, higher_is_better=False):
    return deltas.figure_delta(
        new=new,
        base=base,
        new_interval=new_ci,
        base_interval=base_ci,
        higher_is_better=higher_is_better,
    )


@pytest.mark.parametrize(("pair", "expected"), EDGES)
def test_it_decides_the_edges_by_the_interval_or_else_the_point(pair, expected):
    delta = _delta(*pair)
    assert (delta.verdict, delta.text) == expected


def test_the_words_read_as_the_issue_asks():
    def words(new, base, new_ci, base_ci, higher_is_better=False):
        return _delta(new, base, new_ci, base_ci, higher_is_better).text

    assert words(112.0, 100.0, (110.0, 118.0), (99.0, 101.0)) == "worse by 12 % (CI 8.9–19 %)"
    assert words(80.0, 100.0, (76.0, 84.0), (99.0, 101.0)) == "better by 20 % (CI 15–25 %)"
    assert words(101.0, 100.0, (97.0, 104.0), (98.0, 102.0)) == "within noise (CI −4.9–+6.1 %)"
    assert words(112.0, 100.0, None, None) == "worse by 12 % (no interval)"
