"""95 % confidence intervals of a level's headline figures that claim what a re-run would show.

Guarantees:

- Keys are the ``LevelResult`` fields they bound:
  ``{median,p90,p95,p99}_{ttft,tpot,itl,e2el}_ms``,
  ``output_throughput``, and with latency SLOs ``request_goodput``
  and ``slo_attainment_pct``; each ``{"low": …, "high": …}``.
- Rates (output throughput, goodput) of a **closed loop** (a ``concurrency`` level) by
  **Little's law**: with the same number of requests always in flight, a rate of what the
  requests deliver is that number × Σ delivered ÷ Σ time in flight, so the figure's relative
  error is that ratio's, by the circular block bootstrap below. Spans of time cannot judge
  such a loop: its requests start in waves, each wave's prompts stall the decodes for a
  while, so the rate of a span depends on the phase of the wave it caught — the same in
  every re-run of the same traffic, not noise — and a window of three waves read as ±25 %
  where re-runs with other noise seeds differed by 2 % (``benchmarks/reproducibility.py``).
- Rates of an **open loop** (a ``request_rate`` level) by **batch means**: the window is
  cut into up to ``BATCHES`` equal spans of time, each span's rate is the output tokens that
  arrived in it (goodput: the good requests that ended in it), and the interval is Student's
  t over those rates, its variance inflated by their lag-1 correlation, (1 + ρ) / (1 − ρ).
  In neither loop are requests independent draws (they share batches and the whole level
  shares one engine state): resampling requests as rates would claim a certainty the level
  does not have.
- Latency percentiles (and the attainment) by a **circular block bootstrap** over requests
  in the order sent: each resample strings together blocks of ``n / BATCHES`` consecutive
  requests from random starts, percentile method. Requests sent together miss their
  targets together (a wave behind one prefill), so resampling them one by one would claim a
  tail far surer than a re-run shows (the demo's p99 TTFT at 64 users: 177 ms in one run,
  253 in the next, with intervals that did not meet). Very many requests get fewer
  resamples (at least ``MIN_ITL_RESAMPLES``), taken in chunks that bound the memory. ITL:
  its samples are the gaps of a few requests, so its percentiles are bootstrapped over
  requests (each resample pools the gaps of the requests it drew; a cluster bootstrap on
  NumPy's generator), never over gaps, with the same bound on resamples.
- **A re-run lands on another pod**: every interval of a latency or a rate also holds the
  pod-to-pod spread of GPUs of one type (``agents.hardware.POD_SPEED_SPREAD``), added in
  quadrature to its half-widths around the level's own figure (``with_rerun_spread``).
- Deterministic: the resampling is seeded, so the same requests give the same intervals.
- A figure with fewer than ``MIN_SAMPLES`` samples, or whose samples are all equal, has no
  interval (a single value is not evidence of spread); a rate whose window holds fewer than
  three batches of ``MIN_PER_BATCH`` requests has none either.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist

import numpy as np
from scipy import stats

from agents.hardware import POD_SPEED_SPREAD
from agents.loadgen.records import RequestRecord
from agents.loadgen.results import request_meets_slos
from agents.protocol import Slos

MIN_SAMPLES = 5
# Batch means: at most this many spans of time per window, each of at least this many requests.
BATCHES = 10
MIN_PER_BATCH = 5
# The most lag-1 correlation between spans the variance correction trusts.
MAX_LAG_CORRELATION = 0.9
RESAMPLES = 999
CONFIDENCE = 0.95
MIN_ITL_RESAMPLES = 199
# Resamples × gaps the ITL bootstrap computes (its CPU) and holds at once (int64: 32 MB).
ITL_CELLS = 4_000_000
# Percentiles with an interval, by the statistic name LevelResult gives them.
_PERCENTILES = {"median": 50, "p90": 90, "p95": 95, "p99": 99}
_PER_REQUEST = {
    "ttft": lambda record: record.ttft,
    "tpot": lambda record: record.tpot,
    "e2el": lambda record: record.latency,
}


def _interval(
    samples: Sequence[float] | np.ndarray, statistic: Callable[[np.ndarray, int], np.ndarray]
) -> dict[str, float] | None:
    """The circular block bootstrap's percentile interval of ``statistic`` over ``samples``
    in the order sent (module docstring); a row of ``samples`` may hold several figures of
    one request (the statistic then sees resamples × requests × figures)."""
    data = np.asarray(samples, dtype=float)
    count = len(data)
    if count < MIN_SAMPLES or np.all(data == data[0]):
        return None
    block = max(1, math.ceil(count / BATCHES))
    blocks = math.ceil(count / block)
    resamples = int(min(RESAMPLES, max(MIN_ITL_RESAMPLES, ITL_CELLS // count)))
    chunk = max(1, ITL_CELLS // count)  # resamples held at once
    rng = np.random.default_rng(0)
    found = []
    for first in range(0, resamples, chunk):
        rows = min(resamples - first, chunk)
        starts = rng.integers(0, count, size=(rows, blocks, 1))
        picked = ((starts + np.arange(block)) % count).reshape(rows, blocks * block)[:, :count]
        found.append(statistic(data[picked], 1))
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(np.concatenate(found), [tail, 100 - tail])
    if not (np.isfinite(low) and np.isfinite(high)):
        return None
    return {"low": float(low), "high": float(high)}


def confidence_intervals(
    measured: Sequence[RequestRecord],
    served: Sequence[RequestRecord],
    *,
    start: float,
    end: float,
    slos: Slos | None,
    figures: Mapping[str, object],
) -> dict[str, dict[str, float]]:
    """Intervals of the figures of a level whose latencies come from ``measured`` and whose
    rates from ``served`` over the window ``[start, end]``, around its ``figures`` (the
    level's result: see the module docstring)."""
    intervals: dict[str, dict[str, float] | None] = {}
    successes = [record for record in measured if record.success]
    for metric, read in _PER_REQUEST.items():
        values = [value * 1000 for record in successes if (value := read(record)) is not None]
        for name, q in _PERCENTILES.items():
            intervals[f"{name}_{metric}_ms"] = _interval(
                values, lambda sample, axis, q=q: np.percentile(sample, q, axis=axis)
            )
    intervals.update(_itl_intervals(successes))
    batches = _batch_count(successes, start, end)
    closed_loop = figures.get("concurrency") is not None
    tokens = [record.served_output_tokens if record.success else 0 for record in measured]
    if closed_loop:
        intervals["output_throughput"] = _loop_rate_interval(
            measured, tokens, batches, figures.get("output_throughput")
        )
    else:
        # Every token that arrived in the window: of the requests that started in it and of
        # those that ended in it (a request in flight when the window opened is among the
        # latter).
        delivering = {id(record): record for record in (*measured, *served) if record.success}
        intervals["output_throughput"] = _rate_interval(
            _token_times(list(delivering.values())),
            start,
            end,
            batches,
            figures.get("output_throughput"),
        )
    if slos is not None and slos.latency_targets and measured:
        good = [1.0 if r.success and request_meets_slos(r, slos) else 0.0 for r in measured]
        intervals["request_goodput"] = (
            _loop_rate_interval(measured, good, batches, figures.get("request_goodput"))
            if closed_loop
            else _rate_interval(
                [(r.finished, 1.0) for r, meets in zip(measured, good, strict=True) if meets],
                start,
                end,
                batches,
                figures.get("request_goodput"),
            )
        )
        intervals["slo_attainment_pct"] = _interval(
            good, lambda sample, axis: np.mean(sample, axis=axis) * 100
        )
    found = {key: value for key, value in intervals.items() if value is not None}
    return with_rerun_spread(found, figures)


def _token_times(records: Sequence[RequestRecord]) -> list[tuple[float, float]]:
    """When each content message of ``records`` arrived, and how many output tokens it
    carried (the request's served tokens spread over its messages)."""
    times = []
    for record in records:
        if record.ttft is None:
            continue
        messages = 1 + len(record.itl)
        share = record.served_output_tokens / messages
        moment = record.start + record.ttft
        times.append((moment, share))
        for gap in record.itl:
            moment += gap
            times.append((moment, share))
    return times


def _batch_count(records: Sequence[RequestRecord], start: float, end: float) -> int:
    """How many spans a window is cut into for batch means: at most ``BATCHES``, each holding
    ``MIN_PER_BATCH`` requests; 0 when fewer than three fit."""
    fit = min(BATCHES, len(records) // MIN_PER_BATCH) if end > start else 0
    return fit if fit >= 3 else 0


def _rate_interval(
    amounts: Sequence[tuple[float | None, float]],
    start: float,
    end: float,
    batches: int,
    value: object,
) -> dict[str, float] | None:
    """Batch means (module docstring) over ``batches`` spans of ``[start, end]`` of a rate
    whose ``amounts`` — (when, how much) — fell in it, around the level's ``value`` of it."""
    if not batches or not isinstance(value, int | float):
        return None
    width = (end - start) / batches
    sums = np.zeros(batches)
    for moment, amount in amounts:
        if moment is None or not start <= moment <= end:
            continue
        sums[min(batches - 1, int((moment - start) / width))] += amount
    rates = sums / width
    # Spans shorter than the process's memory move together: their lag-1 correlation
    # inflates the variance of the mean by (1 + rho) / (1 - rho).
    centred = rates - rates.mean()
    power = float(np.dot(centred, centred))
    rho = float(np.dot(centred[:-1], centred[1:]) / power) if power > 0 else 0.0
    rho = min(max(rho, 0.0), MAX_LAG_CORRELATION)
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, batches - 1) * rates.std(ddof=1))
    half *= math.sqrt((1 + rho) / (1 - rho) / batches)
    return {"low": max(0.0, value - half), "high": value + half}


def _loop_rate_interval(
    measured: Sequence[RequestRecord], amounts: Sequence[float], batches: int, value: object
) -> dict[str, float] | None:
    """A closed loop's rate by Little's law (module docstring) around the level's ``value``:
    the relative interval of Σ ``amounts`` ÷ Σ time in flight over ``measured`` (one amount
    per request) by the circular block bootstrap in the order sent; none where batch means
    would have none (``batches`` 0)."""
    if not batches or not isinstance(value, int | float) or value <= 0:
        return None
    rows = np.array(
        sorted(
            (record.start, amount, record.finished - record.start)
            for record, amount in zip(measured, amounts, strict=True)
            if record.finished > record.start
        )
    )
    if rows.size == 0 or rows[:, 1].sum() <= 0:
        return None
    delivered, in_flight = rows[:, 1], rows[:, 2]
    ratio = delivered.sum() / in_flight.sum()
    found = _interval(
        rows[:, 1:], lambda sample, axis: sample[..., 0].sum(axis) / sample[..., 1].sum(axis)
    )
    if found is None:  # every request alike: the ratio has no spread of its own
        return {"low": float(value), "high": float(value)}
    return {"low": value * found["low"] / ratio, "high": value * found["high"] / ratio}


def with_rerun_spread(
    intervals: Mapping[str, dict[str, float]], figures: Mapping[str, object]
) -> dict[str, dict[str, float]]:
    """``intervals`` widened by the pod-to-pod spread (module docstring): each half-width of
    a latency or rate figure and ``z × POD_SPEED_SPREAD × figure`` added in quadrature (a
    share, the attainment, is left as it is, and so is a figure the result does not give)."""
    z = NormalDist().inv_cdf(0.5 + CONFIDENCE / 2)
    widened = {}
    for key, interval in intervals.items():
        value = figures.get(key)
        if key == "slo_attainment_pct" or not isinstance(value, int | float):
            widened[key] = dict(interval)
            continue
        spread = z * POD_SPEED_SPREAD * abs(value)
        low = value - math.hypot(max(0.0, value - interval["low"]), spread)
        high = value + math.hypot(max(0.0, interval["high"] - value), spread)
        widened[key] = {"low": max(0.0, low), "high": high}
    return widened


def _itl_intervals(successes: Sequence[RequestRecord]) -> dict[str, dict[str, float] | None]:
    """ITL percentiles' intervals by a bootstrap over requests (see the module docstring)."""
    gaps_of = [np.asarray(record.itl, dtype=float) * 1000 for record in successes if record.itl]
    count = len(gaps_of)
    if count < MIN_SAMPLES:
        return {}
    gaps = np.concatenate(gaps_of)
    owner = np.repeat(np.arange(count), [len(g) for g in gaps_of])
    order = np.argsort(gaps, kind="stable")
    gaps, owner = gaps[order], owner[order]
    if gaps[0] == gaps[-1]:
        return {}
    resamples = int(min(RESAMPLES, max(MIN_ITL_RESAMPLES, ITL_CELLS // gaps.size)))
    chunk = max(1, ITL_CELLS // gaps.size)
    rng = np.random.default_rng(0)
    # How often each resample drew each request; a gap weighs as much as its request.
    drawn = rng.multinomial(count, np.full(count, 1 / count), size=resamples)
    values = {name: [] for name in _PERCENTILES}
    for first in range(0, resamples, chunk):
        cumulative = np.cumsum(drawn[first : first + chunk][:, owner], axis=1)
        totals = cumulative[:, -1]
        for name, q in _PERCENTILES.items():
            # Each resample's q-th percentile of its pooled gaps (the inverted CDF).
            ranks = np.argmax(cumulative >= (q / 100 * totals)[:, None], axis=1)
            values[name].append(gaps[ranks])
    tail = (1 - CONFIDENCE) / 2 * 100
    intervals = {}
    for name, found in values.items():
        low, high = np.percentile(np.concatenate(found), [tail, 100 - tail])
        intervals[f"{name}_itl_ms"] = {"low": float(low), "high": float(high)}
    return intervals
