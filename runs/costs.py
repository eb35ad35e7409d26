"""What a run cost and what a token cost: billed seconds, run cost, $ per 1M output tokens at
the best load level under the SLOs (also with cold start amortized), spend per month.

Guarantees (docs/costs.md gives every formula with a worked example):

- Pure: no database and no clock. Callers pass what they read; ``runs.selectors`` does the
  reading.
- Money is ``Decimal`` from end to end. A float where money or seconds are expected is
  refused (``TypeError``); a measured float (a throughput) enters as ``Decimal(str(x))``, its
  shortest decimal form, never its binary expansion.
- Arithmetic runs at 34 significant digits whatever the caller's decimal context, and each
  public function rounds every money figure it returns once, at the end, to 0.0001 USD with
  ROUND_HALF_EVEN. Nothing is rounded on the way.
- Every rate here is USD per *pod*-hour (the whole pod, all its GPUs — what Runpod's
  ``costPerHr`` bills). A catalogue price per GPU-hour becomes a pod rate in one place only,
  ``pod_usd_per_hr``, so no figure is multiplied by the GPU count twice.
- A cost per token is priced for the GPUs the trial uses (``GpuShare``: tensor × pipeline ×
  data parallel sizes of its configuration), not for the whole pod: a TP=1 trial on a 4-GPU
  pod pays a quarter of the pod's rate, so trials of different parallelism compare per GPU
  used. The run's own cost is the whole pod's, as billed.
- A cost derived from a simulated trial says so (``TrialCost.simulated``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_CEILING, ROUND_HALF_EVEN, Context, Decimal, localcontext
from typing import Any

from agents.protocol import LEVEL_RESULT_KEY as KEY
from agents.protocol import MET, load_verdict

# The rules a cost per token is priced by, shared with the CLI's gate: one copy for both.
from figures.costs import usd_per_million_output_tokens
from figures.gpu_share import GpuShare
from figures.levels import load_key

USD_QUANTUM = Decimal("0.0001")
SECONDS_PER_HOUR = Decimal(3600)
ONE_MILLION = Decimal(1_000_000)
# One hour of serving at the level's throughput: long enough that a reader sees what a
# deployment pays for starting, short enough that the start-up is not hidden.
DEFAULT_SERVING_WINDOW_SECONDS = Decimal(3600)

_ARITHMETIC = Context(prec=34, rounding=ROUND_HALF_EVEN)
# A level's kind of load is the result's key that holds it.
CLOSED_LOOP = KEY.concurrency
OPEN_LOOP = KEY.request_rate
# What the rules here read of a level's result besides its load (the reports read only
# these, and what they show, out of the database: ``runs.selectors.level_figures``).
RESULT_KEYS_READ = (
    KEY.completed,
    KEY.failed,
    KEY.partial,
    KEY.slo,
    KEY.simulated,
    KEY.output_throughput,
)


def round_usd(amount: Decimal) -> Decimal:
    """``amount`` rounded to 0.0001 USD, half to even (the one rounding rule for money)."""
    with localcontext(_ARITHMETIC):
        return _exact(amount, "amount").quantize(USD_QUANTUM, rounding=ROUND_HALF_EVEN)


def _exact(value: Any, name: str) -> Decimal:
    # Money and billed seconds must already be exact: a float here has lost digits before
    # we see it, so it is refused rather than silently converted.
    if isinstance(value, bool) or not isinstance(value, Decimal | int):
        raise TypeError(f"{name} must be a Decimal (or int), not {type(value).__name__}")
    value = Decimal(value)
    if not value.is_finite():
        raise ValueError(f"{name} must be finite, not {value}")
    return value


def _measured(value: Any, name: str) -> Decimal | None:
    """A measured figure (JSON number) as a Decimal through its shortest decimal form."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Decimal | int | float):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, not {value}")
    return Decimal(str(value))


# --- A pod's billed time and what it cost ------------------------------------------------


def billed_seconds(started: datetime, ended: datetime | None) -> Decimal:
    """Whole seconds billed for a pod that lived from ``started`` to ``ended``.

    Runpod bills per second, so any started second is billed: the lifetime is rounded *up*.
    A pod that has not ended has no billed time yet (``ValueError``): the caller passes the
    end it observed, never "now", so a figure is never computed from a guess.
    """
    if started is None or ended is None:
        raise ValueError(
            "billed seconds need both the pod's start and its end; it has not ended yet"
        )
    lifetime = ended - started  # TypeError when one is naive and the other aware
    if lifetime < timedelta(0):
        raise ValueError(f"the pod ended ({ended}) before it started ({started})")
    with localcontext(_ARITHMETIC):
        # timedelta is exact in days, seconds and microseconds: no float on the way.
        exact = Decimal(lifetime.days * 86_400 + lifetime.seconds) + Decimal(
            lifetime.microseconds
        ).scaleb(-6)
        return exact.to_integral_value(rounding=ROUND_CEILING)


def pod_usd_per_hr(*, gpu_usd_per_hr: Decimal, gpu_count: int) -> Decimal:
    """A pod's rate from a price per GPU-hour (the catalogue's unit): price × GPUs.

    The only place a per-GPU price is multiplied by the GPU count. Runpod's ``costPerHr`` is
    already a pod rate and must not pass through here.
    """
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 1:
        raise ValueError(f"gpu_count must be a whole number ≥ 1, not {gpu_count!r}")
    with localcontext(_ARITHMETIC):
        return round_usd(_exact(gpu_usd_per_hr, "gpu_usd_per_hr") * gpu_count)


def run_cost_usd(*, seconds: Decimal, pod_usd_per_hr: Decimal) -> Decimal:
    """What ``seconds`` of a pod cost at its rate per pod-hour: seconds × rate ÷ 3600.

    ``pod_usd_per_hr`` is for the whole pod; convert a per-GPU price with ``pod_usd_per_hr()``.
    """
    with localcontext(_ARITHMETIC):
        seconds = _exact(seconds, "seconds")
        if seconds < 0:
            raise ValueError(f"seconds must not be negative, not {seconds}")
        return round_usd(seconds * _exact(pod_usd_per_hr, "pod_usd_per_hr") / SECONDS_PER_HOUR)


def token_cost_usd(
    *,
    input_tokens: int,
    output_tokens: int,
    usd_per_1m_input_tokens: Decimal,
    usd_per_1m_output_tokens: Decimal,
) -> Decimal:
    """What tokens cost at an existing endpoint's price per 1M input and output tokens:
    input × its price ÷ 1e6 + output × its price ÷ 1e6."""
    with localcontext(_ARITHMETIC):
        counts = (_exact(input_tokens, "input_tokens"), _exact(output_tokens, "output_tokens"))
        if min(counts) < 0:
            raise ValueError("token counts must not be negative")
        return round_usd(
            (
                counts[0] * _exact(usd_per_1m_input_tokens, "usd_per_1m_input_tokens")
                + counts[1] * _exact(usd_per_1m_output_tokens, "usd_per_1m_output_tokens")
            )
            / ONE_MILLION
        )


def _throughput(value: Any) -> Decimal | None:
    # No tokens served means no cost per token (None), not a division by zero.
    throughput = _measured(value, "output throughput")
    if throughput is not None and throughput < 0:
        raise ValueError(f"output throughput must not be negative, not {throughput}")
    return throughput or None


def _usd_per_million(throughput: Decimal, pod_rate: Decimal) -> Decimal:
    # Unrounded, in this module's context: callers round once, at the end.
    return usd_per_million_output_tokens(pod_rate, throughput)


def _share_of_rate(rate: Decimal, share: GpuShare | None) -> Decimal:
    return rate if share is None else share.rate_for(rate)


def level_cost_per_million_output_tokens(
    *,
    output_throughput_tok_s: float | Decimal | None,
    pod_usd_per_hr: Decimal,
    share: GpuShare | None = None,
) -> Decimal | None:
    """USD per 1M output tokens while the trial serves at this throughput (None when nothing
    was served): its GPUs' $/s ÷ output tokens/s × 1e6, its GPUs' $/s being the pod's rate ×
    ``share`` (``GpuShare``; None: the whole pod, as for an endpoint's price per hour).

    With the load generator's ``output_throughput = total_output_tokens / duration`` this is
    DESIGN.md's "billed $/s × measured wall seconds ÷ output tokens × 1e6".
    """
    with localcontext(_ARITHMETIC):
        rate = _share_of_rate(_exact(pod_usd_per_hr, "pod_usd_per_hr"), share)
        throughput = _throughput(output_throughput_tok_s)
        return None if throughput is None else round_usd(_usd_per_million(throughput, rate))


# --- The best load level under the SLOs --------------------------------------------------


def level_load(level: Mapping[str, Any]) -> tuple[str, Decimal]:
    """The level's kind (``"concurrency"`` or ``"request_rate"``) and how heavy it is; an
    unbounded rate (``"inf"``) is heavier than any finite one."""
    concurrency, rate = level.get(CLOSED_LOOP), level.get(OPEN_LOOP)
    if (concurrency is None) == (rate is None):
        raise ValueError("a level has exactly one of concurrency and request_rate")
    if concurrency is not None:
        return CLOSED_LOOP, Decimal(concurrency)
    if rate == "inf":
        return OPEN_LOOP, Decimal("Infinity")
    return OPEN_LOOP, _measured(rate, "request_rate")


def _load_text(level: Mapping[str, Any]) -> str:
    level_load(level)  # exactly one of the two, or ValueError
    return load_key(concurrency=level.get(CLOSED_LOOP), request_rate=level.get(OPEN_LOOP))


def qualifying_levels(levels: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The levels whose figures may be reported as "meets the SLOs", in order: those of a load
    whose every measurement (repeats, a search's repeat of a bracket end, a level too close
    to call measured again) judged together met them (``agents.protocol.load_verdict``, as
    the capacity search and the run page judge a load) — each completed requests, none
    failed, none was cut short (``partial``), and every objective is confidently met on the
    pooled counts. A load measured without SLOs has nothing to miss and qualifies.
    """
    levels = list(levels)
    by_load: dict[tuple, list[Mapping[str, Any]]] = defaultdict(list)
    for level in levels:
        by_load[level_load(level)].append(level)
    met = {load for load, measured in by_load.items() if load_verdict(measured) == MET}
    return [level for level in levels if level_load(level) in met]


def level_is_simulated(level: Mapping[str, Any]) -> bool:
    """Whether a level carries the simulator's ``simulated`` label (protocol 1 agents sent
    ``true``, later ones the simulator's speed)."""
    return level.get(KEY.simulated) not in (None, False)


def _ranked_kind(levels: list[Mapping[str, Any]]) -> str | None:
    # Closed-loop and open-loop levels are not one scale (64 users ≠ 64 requests/s), so
    # only one kind is ranked: closed-loop when the trial has any, as the sweep's main axis.
    kinds = {level_load(level)[0] for level in levels}
    if CLOSED_LOOP in kinds:
        return CLOSED_LOOP
    return OPEN_LOOP if kinds else None


def best_level_under_slos(levels: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The heaviest qualifying level (``qualifying_levels``), or None when none qualifies.

    ``levels`` are the load generator's level results (each with ``concurrency`` or
    ``request_rate``). Levels are ranked by concurrency, or by request rate when the trial
    has no closed-loop level: when both kinds exist only the closed-loop ones are ranked,
    even if none of them qualifies, so that two trials are never compared on different
    kinds of load.
    """
    levels = list(levels)
    kind = _ranked_kind(levels)
    candidates = [level for level in qualifying_levels(levels) if level_load(level)[0] == kind]
    return max(candidates, key=lambda level: level_load(level)[1], default=None)


# --- Cost per token of a trial ------------------------------------------------------------


@dataclass(frozen=True)
class TrialCost:
    """A trial's cost per 1M output tokens, every figure it rests on, and the assumptions.

    Money fields are Decimals rounded to 0.0001 USD; a None means "not known" and ``notes``
    says why. ``simulated`` figures are in the modelled hardware's time and priced at its
    rate: show them apart from measured ones, never in one ranking.
    """

    simulated: bool
    level: Mapping[str, Any] | None  # the chosen level's result, as given
    load: str | None  # "concurrency=64", "request_rate=inf"
    output_throughput_tok_s: Decimal | None
    pod_usd_per_hr: Decimal | None  # the whole pod's rate
    price_source: str
    usd_per_million_output_tokens: Decimal | None
    cold_start_phase: str | None  # the last cold-start phase recorded
    cold_start_seconds: Decimal | None  # engine process start → that phase
    cold_start_usd: Decimal | None  # what one cold start costs at the pod's rate
    serving_window_seconds: Decimal  # the serving a cold start is amortized over
    usd_per_million_output_tokens_cold_start_amortized: Decimal | None
    notes: tuple[str, ...]
    share: GpuShare | None = None  # the GPUs its cost per token is priced for; None: the pod

    @property
    def usd_per_hr(self) -> Decimal | None:
        """The rate its cost per token is priced at: the pod's × its ``share`` of the GPUs."""
        if self.pod_usd_per_hr is None:
            return None
        with localcontext(_ARITHMETIC):
            return round_usd(_share_of_rate(self.pod_usd_per_hr, self.share))

    @property
    def priced_for(self) -> str:
        """The share in words (``GpuShare.describe``); "" without a share."""
        return "" if self.share is None else self.share.describe()


def _last_cold_start_phase(cold_start: Mapping[str, Any]) -> tuple[str, Decimal] | None:
    # Phase times are seconds since the engine process started, so the last phase is the
    # latest time (first_token, or health_ready when no token was timed). On a tie the later
    # entry wins: the site stores phases in the order they arrive.
    last = None
    for phase, seconds in cold_start.items():
        value = _measured(seconds, f"cold_start[{phase!r}]")
        if value is not None and (last is None or value >= last[1]):
            last = (phase, value)
    return last


def trial_cost_per_million_output_tokens(
    levels: Iterable[Mapping[str, Any]],
    *,
    pod_usd_per_hr: Decimal | None,
    cold_start: Mapping[str, Any],
    price_source: str = "",
    serving_window_seconds: Decimal = DEFAULT_SERVING_WINDOW_SECONDS,
    simulated: bool = False,
    share: GpuShare | None = None,
) -> TrialCost:
    """$ per 1M output tokens at the trial's best level under the SLOs, steady and with the
    cold start amortized.

    Steady: ``level_cost_per_million_output_tokens`` at ``best_level_under_slos``.
    Amortized: a deployment pays its cold start C once, then serves W seconds
    (``serving_window_seconds``) at that level's throughput T, so
    ``pod $/s × (C + W) ÷ (T × W) × 1e6`` = steady × (1 + C/W). C is the time of the last
    cold-start phase recorded (``cold_start``: phase → seconds since the engine process
    started); renting and booting the pod before that is not in it.

    Every figure per token is priced for the trial's ``share`` of the pod's GPUs (None: the
    whole pod); ``cold_start_usd`` too, as the cold start of those GPUs.
    ``pod_usd_per_hr`` None (no price known) leaves the money figures None. ``simulated`` is
    set when the caller says so or any level carries the simulator's ``simulated`` label.
    """
    levels = list(levels)
    with localcontext(_ARITHMETIC):
        window = _exact(serving_window_seconds, "serving_window_seconds")
        if window <= 0:
            raise ValueError(f"the serving window must be positive, not {window}")
        pod_rate = None if pod_usd_per_hr is None else _exact(pod_usd_per_hr, "pod_usd_per_hr")
        rate = None if pod_rate is None else _share_of_rate(pod_rate, share)
        simulated = simulated or any(level_is_simulated(level) for level in levels)
        notes: list[str] = [
            "A level qualifies when every SLO given is met at p99, no request failed and it "
            "was not cut short; a level measured without SLOs qualifies."
        ]
        kinds = {level_load(level)[0] for level in levels}
        if kinds == {CLOSED_LOOP, OPEN_LOOP}:
            notes.append(
                "Closed-loop levels ranked by concurrency; the open-loop levels are not "
                "compared with them."
            )
        if simulated:
            notes.append(
                "Simulated: throughput in the modelled hardware's time, priced at its rate; "
                "not a measurement."
            )

        level = best_level_under_slos(levels)
        throughput = None if level is None else _throughput(level.get(KEY.output_throughput))
        if level is None:
            notes.append("No level met the SLOs without failures: no cost per token.")
        if rate is None:
            notes.append(f"No price known ({price_source or 'no source'}): no cost.")
        elif share is not None and not share.whole_pod:
            notes.append(
                f"Priced for the {share.used} of the pod's {share.pod} GPUs the configuration "
                "uses (tensor × pipeline × data parallel sizes): the pod's rate × "
                f"{share.used}/{share.pod}."
            )

        steady = amortized = cold_usd = None
        if rate is not None and throughput is not None:
            steady = _usd_per_million(throughput, rate)

        last_phase = _last_cold_start_phase(cold_start)
        if last_phase is None:
            notes.append("No cold-start phase was recorded: nothing to amortize.")
        else:
            phase, seconds = last_phase
            notes.append(
                f"Cold start: {seconds} s (engine process start → {phase}), paid once per "
                f"deployment and amortized over {window} s of serving at the level's "
                "throughput; pod provisioning and image pull are not included."
            )
            if rate is not None:
                cold_usd = rate * seconds / SECONDS_PER_HOUR
            if steady is not None:
                amortized = steady * (seconds + window) / window

        return TrialCost(
            simulated=simulated,
            level=level,
            load=None if level is None else _load_text(level),
            output_throughput_tok_s=throughput,
            pod_usd_per_hr=None if pod_rate is None else round_usd(pod_rate),
            price_source=price_source,
            usd_per_million_output_tokens=None if steady is None else round_usd(steady),
            cold_start_phase=None if last_phase is None else last_phase[0],
            cold_start_seconds=None if last_phase is None else last_phase[1],
            cold_start_usd=None if cold_usd is None else round_usd(cold_usd),
            serving_window_seconds=window,
            usd_per_million_output_tokens_cold_start_amortized=(
                None if amortized is None else round_usd(amortized)
            ),
            notes=tuple(notes),
            share=share,
        )


# --- The UTC calendar month a run's spend counts in -----------------------------------------


def month_start(moment: datetime) -> date:
    """The first day of the UTC calendar month ``moment`` falls in (aware datetimes only)."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{moment} has no time zone: its month is ambiguous")
    return moment.astimezone(UTC).date().replace(day=1)


def month_bounds_utc(month: date) -> tuple[datetime, datetime]:
    """[start, end) of the UTC calendar month whose first day is ``month``."""
    if month.day != 1:
        raise ValueError(f"a month is given by its first day, not {month}")
    following = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return (
        datetime(month.year, month.month, 1, tzinfo=UTC),
        datetime(following.year, following.month, 1, tzinfo=UTC),
    )
