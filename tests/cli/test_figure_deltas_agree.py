"""The gate's copy of the change-and-interval formula says what the site's says (issue 16):
the CLI may not import the site (its import contract), so this test feeds both the same
pairs and holds them to the same numbers, verdicts and words."""

from __future__ import annotations

import math

import pytest

from benchsite_cli import gate
from runs.selectors import figure_deltas

# (new, base, new interval, base interval, higher is better)
PAIRS = [
    (112.0, 100.0, (110.0, 118.0), (99.0, 101.0), False),  # worse, CI straddles +10 %
    (125.0, 100.0, (120.0, 130.0), (99.0, 101.0), False),  # worse, CI beyond +10 %
    (80.0, 100.0, (76.0, 84.0), (99.0, 101.0), False),  # lower latency: better
    (900.0, 1000.0, (880.0, 920.0), (990.0, 1010.0), True),  # less throughput: worse
    (1100.0, 1000.0, (1080.0, 1120.0), (990.0, 1010.0), True),  # more throughput: better
    (101.0, 100.0, (97.0, 104.0), (98.0, 102.0), False),  # within noise
    (4.0, 8.0, (4.0, 6.0), (8.0, 12.0), True),  # a capacity bracket
    (8.0, 8.0, (8.0, math.inf), (8.0, 12.0), True),  # a search that never failed
    (5.0, 0.0, (4.0, 6.0), (0.0, 0.0), True),  # from nothing
    (0.0, 0.0, (0.0, 0.0), (0.0, 0.0), True),  # nothing either side
    (112.0, 100.0, None, (99.0, 101.0), False),  # one side has no interval
    (112.0, 100.0, None, None, False),  # results stored before intervals
    (100.0, 100.0, None, None, True),  # no interval, no move
    (10.0, 9.0, (11.0, 9.0), (8.0, 10.0), True),  # not an interval: low above high
    (10.0, 9.0, (-1.0, 12.0), (8.0, 10.0), True),  # not a non-negative figure
]


@pytest.mark.parametrize(("new", "base", "new_ci", "base_ci", "higher_is_better"), PAIRS)
def test_the_gate_and_the_site_agree(new, base, new_ci, base_ci, higher_is_better):
    site = figure_deltas.figure_delta(
        new=new,
        base=base,
        new_interval=new_ci,
        base_interval=base_ci,
        higher_is_better=higher_is_better,
    )
    change = gate.change_pct(new, base)
    interval = (
        gate.change_interval_pct(new_ci, base_ci)
        if new_ci is not None and base_ci is not None
        else None
    )
    assert change == site.change_pct
    assert interval == site.interval_pct
    assert gate.change_verdict(change, interval, higher_is_better=higher_is_better) == (
        site.verdict
    )
    assert gate.change_wording(change, interval, higher_is_better=higher_is_better) == site.text


def test_the_words_read_as_the_issue_asks():
    def words(new, base, new_ci, base_ci, higher_is_better=False):
        return figure_deltas.figure_delta(
            new=new,
            base=base,
            new_interval=new_ci,
            base_interval=base_ci,
            higher_is_better=higher_is_better,
        ).text

    assert words(112.0, 100.0, (110.0, 118.0), (99.0, 101.0)) == "worse by 12 % (CI 8.9–19 %)"
    assert words(80.0, 100.0, (76.0, 84.0), (99.0, 101.0)) == "better by 20 % (CI 15–25 %)"
    assert words(101.0, 100.0, (97.0, 104.0), (98.0, 102.0)) == "within noise (CI −4.9–+6.1 %)"
    assert words(112.0, 100.0, None, None) == "worse by 12 % (no interval)"
