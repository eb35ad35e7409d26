"""Whether a load met an objective, at a stated confidence: met, missed, or too close to call.

A latency objective "p99 TTFT < 500 ms" holds when at most 1 % of requests take longer. A
level that measured ``judged`` requests, ``beyond`` of them over the target, is judged by a
one-sided binomial test of that share against the share the percentile allows:

- **met** — so few beyond the target that a share at the limit would give as few at most
  ``1 − confidence`` of the time;
- **missed** — so many that a share at the limit would give as many at most that often;
- **too close** — neither: measure longer (pool another window's counts) before it counts.

The attainment objective ("≥ 95 % of requests meet every target") is the same test on the
requests that missed some target (it allows 5 % of them).

Requests sent together share batches and one engine state, so their misses come in clumps
(a wave of a closed loop that all waited behind one prefill): counted as independent, eight
misses in one clump would read as a confident "missed" that a longer run does not repeat.
So a level also reports its counts per span of its window (``span_counts``: up to
``VERDICT_SPANS`` contiguous spans in the order sent), and a verdict must hold by batch
means too — the share over the spans with a one-sided Student-t bound at the same
confidence — or it is too close to call.

Guarantees: pure functions of the counts; a verdict never rests on one percentile's point
value (64 requests cannot show a p99 met: their slowest is the p99); ``requests_to_judge`` is
the fewest requests that can show a percentile met at a confidence (p99 at 95 %: 299), which
a steady window holds at least (``steady_window_requests``).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

Verdict = Literal["met", "missed", "too_close"]
MET: Verdict = "met"
MISSED: Verdict = "missed"
TOO_CLOSE: Verdict = "too_close"
VERDICTS: tuple[Verdict, ...] = (MET, MISSED, TOO_CLOSE)
DEFAULT_CONFIDENCE_PCT = 95.0
# The attainment objective's name in a level's SLO report (latency ones: ``ttft_ms`` …).
ATTAINMENT = "attainment"
# How a verdict reads to people, wherever it is shown.
VERDICT_WORDS = {MET: "met", MISSED: "missed", TOO_CLOSE: "too close"}


def _tail_at_most(k: int, n: int, p: float) -> float:
    """P(X ≤ k) for X ~ Binomial(n, p)."""
    from scipy.stats import binom  # only levels with objectives need it

    return float(binom.cdf(k, n, p))


def _tail_at_least(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p)."""
    from scipy.stats import binom

    return float(binom.sf(k - 1, n, p))


# Batch means for verdicts: at most this many spans of a window, each of at least this many.
VERDICT_SPANS = 10
MIN_PER_SPAN = 5


def span_counts(beyond_flags: Sequence[bool]) -> list[list[int]]:
    """``[beyond, judged]`` of each contiguous span of ``beyond_flags`` (one per request or
    gap, in the order sent): up to ``VERDICT_SPANS`` spans of at least ``MIN_PER_SPAN``; none
    when fewer than two such spans fit."""
    count = len(beyond_flags)
    spans = min(VERDICT_SPANS, count // MIN_PER_SPAN)
    if spans < 2:
        return []
    bounds = [round(index * count / spans) for index in range(spans + 1)]
    return [
        [sum(1 for flag in beyond_flags[start:end] if flag), end - start]
        for start, end in itertools.pairwise(bounds)
    ]


def _batch_means_bounds(spans: Sequence[Sequence[int]], confidence_pct: float):
    """One-sided bounds of the share beyond over ``spans`` (batch means, Student t)."""
    from scipy.stats import t  # only levels with objectives need it

    shares = [beyond / judged for beyond, judged in spans if judged > 0]
    share = sum(beyond for beyond, _ in spans) / sum(judged for _, judged in spans)
    if len(shares) < 2:
        return share, share
    mean = sum(shares) / len(shares)
    spread = math.sqrt(sum((x - mean) ** 2 for x in shares) / (len(shares) - 1))
    margin = float(t.ppf(confidence_pct / 100, len(shares) - 1)) * spread / math.sqrt(len(shares))
    return share - margin, share + margin


def objective_verdict(
    beyond: int,
    judged: int,
    allowed_share: float,
    confidence_pct: float = DEFAULT_CONFIDENCE_PCT,
    spans: Sequence[Sequence[int]] | None = None,
) -> Verdict:
    """The verdict on an objective that allows ``allowed_share`` of requests not to meet it,
    from ``beyond`` of ``judged`` requests that did not, and (given) their counts per span
    (``span_counts``), by which it must hold too (module docstring)."""
    if judged <= 0:
        return TOO_CLOSE
    alpha = 1 - confidence_pct / 100
    if _tail_at_most(beyond, judged, allowed_share) <= alpha:
        verdict = MET
    elif _tail_at_least(beyond, judged, allowed_share) <= alpha:
        verdict = MISSED
    else:
        return TOO_CLOSE
    if not spans:
        return verdict
    low, high = _batch_means_bounds(spans, confidence_pct)
    holds = high < allowed_share if verdict == MET else low > allowed_share
    return verdict if holds else TOO_CLOSE


def allowed_share(*, percentile: float | None = None, attainment_pct: float | None = None):
    """The share of requests an objective lets miss: a latency target judged at
    ``percentile`` (p99: 1 %), or an attainment of ``attainment_pct`` (95 %: 5 %)."""
    if percentile is not None:
        return 1 - percentile / 100
    assert attainment_pct is not None
    return 1 - attainment_pct / 100


def requests_to_judge(percentile: float, confidence_pct: float = DEFAULT_CONFIDENCE_PCT) -> int:
    """The fewest requests that can show ``percentile`` met at ``confidence_pct``: none of
    them beyond the target (p99 at 95 %: 299; p95: 59; p90: 29; p50: 5)."""
    share = percentile / 100
    if share >= 1:
        return 1
    return max(1, math.ceil(math.log(1 - confidence_pct / 100) / math.log(share) - 1e-9))


def combined_verdict(verdicts: Iterable[Verdict]) -> Verdict | None:
    """A level's verdict over its objectives: missed if any is, met if all are, else too
    close (None without objectives)."""
    verdicts = list(verdicts)
    if not verdicts:
        return None
    if MISSED in verdicts:
        return MISSED
    return MET if all(verdict == MET for verdict in verdicts) else TOO_CLOSE


def check_verdict(check: Mapping) -> Verdict:
    """One stored objective check's verdict: its ``verdict`` when it has one, else (a result
    stored before verdicts) its point estimate's ``met``, or with none its value against its
    latency target."""
    verdict = check.get("verdict")
    if verdict in (MET, MISSED, TOO_CLOSE):
        return verdict
    met = check.get("met")
    if met is not None:
        return MET if met else MISSED
    value, target = check.get("value"), check.get("target")
    return MET if value is not None and target is not None and value <= target else MISSED


def level_verdict(slo_report: Mapping | None) -> Verdict | None:
    """One measured level's verdict over the objectives of its SLO report (None: measured
    without SLOs)."""
    return combined_verdict(check_verdict(check) for check in (slo_report or {}).values())


def pooled_check(checks: list[Mapping], confidence_pct: float, *, attainment: bool) -> Verdict:
    """One objective (the ``attainment``, or a latency target) over several measurements of
    one load: their counts pooled (as if one longer window), else (results stored before
    counts) met only when every one was."""
    if all(check.get("judged") is not None for check in checks):
        first = checks[0]
        share = (
            allowed_share(attainment_pct=float(first["target"]))
            if attainment
            else allowed_share(percentile=float(first.get("percentile") or 99))
        )
        # The spans of every measurement, as if one longer window (all, or none: counts
        # stored before spans cannot be split).
        spans = [span for check in checks for span in check.get("spans") or ()]
        every_one_has_spans = all(check.get("spans") for check in checks)
        return objective_verdict(
            sum(int(check["beyond"]) for check in checks),
            sum(int(check["judged"]) for check in checks),
            share,
            confidence_pct,
            spans if every_one_has_spans else None,
        )
    return combined_verdict(check_verdict(check) for check in checks) or MISSED


def _unusable(result: Mapping) -> bool:
    """A level that cannot meet anything: it failed requests, completed none or was cut."""
    return bool(result.get("partial") or (result.get("failed") or 0) > 0) or not result.get(
        "completed"
    )


def load_verdict(results: Sequence[Mapping]) -> Verdict:
    """Every measurement of one load (level results) judged together: missed when one was
    unusable (failed requests, none completed, cut short), else each objective's counts
    pooled over the measurements (``pooled_check``), combined; met when none is given."""
    if not results or any(_unusable(result) for result in results):
        return MISSED
    checks: dict[str, list[Mapping]] = defaultdict(list)
    confidence = DEFAULT_CONFIDENCE_PCT
    for result in results:
        for name, check in (result.get("slo") or {}).items():
            checks[name].append(check)
            confidence = check.get("confidence_pct") or confidence
    return (
        combined_verdict(
            pooled_check(found, confidence, attainment=name == ATTAINMENT)
            for name, found in checks.items()
        )
        or MET
    )
