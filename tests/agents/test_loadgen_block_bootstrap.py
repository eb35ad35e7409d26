"""Latency percentiles' intervals respect requests that miss together (issue 31): a p99 set
by one clump of slow requests (a wave behind one prefill) is far less sure than one set by
slow requests spread over the window, and its interval says so."""

from __future__ import annotations

import numpy as np

from agents.loadgen.confidence import _interval


def p99(sample, axis):
    return np.percentile(sample, 99, axis=axis)


def test_a_tail_of_one_clump_gets_an_interval_that_a_rerun_without_it_lands_in():
    fast, slow = [100.0 + i % 7 for i in range(288)], [1000.0] * 12
    clumped = fast[:150] + slow + fast[150:]
    spread = [value for i in range(12) for value in (slow[i], *fast[i * 24 : (i + 1) * 24])]
    assert sorted(clumped) == sorted(spread)
    # 12 of 300 slow: the p99 is slow either way.
    assert p99(np.asarray(clumped), 0) == p99(np.asarray(spread), 0) == 1000.0
    # Spread out, every stretch of the window holds some: a re-run would show them too.
    assert _interval(spread, p99)["low"] == 1000.0
    # One clump: a re-run may well not meet it; request by request, the interval claimed
    # the slow tail for sure (drawn one by one, fewer than 4 of the 12 in 300 is rare).
    assert _interval(clumped, p99)["low"] < 200.0
    # Deterministic: the same requests give the same interval.
    assert _interval(clumped, p99) == _interval(clumped, p99)
