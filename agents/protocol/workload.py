"""What every trial of a run sends (datasets, ``Workload``, its levels) and the latency
objectives it is judged by (``Slos``): pydantic models that forbid unknown fields, never
coerce types and accept both ``model_validate`` on parsed JSON and ``model_validate_json``."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Annotated, Literal, get_args
from uuid import UUID

import pydantic
from pydantic import (
    Field,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from agents.protocol.errors import json_literal
from agents.protocol.slo_verdicts import DEFAULT_CONFIDENCE_PCT, requests_to_judge
from agents.protocol.strict import StrictModel
from figures.level_results import LATENCY_METRICS

MAX_INPUT_LEN = 1_048_576
MAX_OUTPUT_LEN = 262_144
MAX_CONCURRENCY = 16_384
MAX_LOAD_LEVELS = 32
# Open-loop rates from one request per 1000 s to 10,000 per second ("inf" sends all at once).
REQUEST_RATE_RANGE = (0.001, 10_000.0)
# Gamma shape of the gaps between requests: 0.01 is burstier than any real traffic, 100 as
# steady as a metronome.
BURSTINESS_RANGE = (0.01, 100.0)
# An objective above an hour says nothing a benchmark could measure.
MAX_SLO_MS = 3_600_000.0
# The percentiles an objective may name (``ttft:p95<300ms``); the level results carry these.
SloPercentile = Literal[50, 90, 95, 99]
SLO_PERCENTILES: tuple[int, ...] = get_args(SloPercentile)
# The traffic seed fits a signed 32-bit column and every random generator.
MAX_SEED = 2**31 - 1
# A ramp longer than an hour is not a warm-up.
MAX_RAMP_SECONDS = 3600.0
MAX_CAPACITY_PROBES = 32
MAX_LEVEL_REPEATS = 10
# A level longer than a day is not a load level.
MAX_LEVEL_SECONDS = 86_400.0


InputLen = Annotated[int, Field(ge=1, le=MAX_INPUT_LEN)]
OutputLen = Annotated[int, Field(ge=1, le=MAX_OUTPUT_LEN)]
# JSON has no infinity; "inf" is spelled as a string where it is meaningful (request rates).
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
RequestRateNumber = Annotated[
    float, Field(ge=REQUEST_RATE_RANGE[0], le=REQUEST_RATE_RANGE[1], allow_inf_nan=False)
]
SloMs = Annotated[float, Field(gt=0, le=MAX_SLO_MS, allow_inf_nan=False)]


class RandomDataset(StrictModel):
    """Synthetic prompts of random tokens, as ``vllm bench serve --dataset-name random``.

    Lengths are drawn from ``[len x (1 - range_ratio), len x (1 + range_ratio)]``; a ratio
    below 1 keeps every length at least one token.
    """

    kind: Literal["random"] = "random"
    input_len: InputLen
    output_len: OutputLen
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)


class ShareGptDataset(StrictModel):
    """Conversations from a ShareGPT-format file uploaded to the site, referenced by id.

    ``output_len``, when given, replaces each conversation's own reply length.
    """

    kind: Literal["sharegpt"] = "sharegpt"
    # Lax on purpose: parsed JSON carries a UUID as a string, which strict mode would refuse.
    dataset_id: UUID = Field(strict=False)
    output_len: OutputLen | None = None


class PrefixDataset(StrictModel):
    """Prompts sharing one of ``num_prefixes`` common prefixes, then a unique suffix: the
    workload that shows what prefix caching is worth."""

    kind: Literal["prefix"] = "prefix"
    shared_len: InputLen
    suffix_len: InputLen
    output_len: OutputLen
    num_prefixes: int = Field(default=1, ge=1, le=1024)


# A trace's window starts at most a year into it.
MAX_TRACE_OFFSET_SECONDS = 366 * 86_400.0
# The published trace formats a dataset may hold (``agents.workloads.traces`` reads them).
TraceFormat = Literal["mooncake", "burstgpt", "azure"]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
BurstGptLogType = Literal["Conversation log", "API log"]
# Mooncake's published traces hash blocks of 512 tokens.
MOONCAKE_BLOCK_SIZE = 512
MAX_BLOCK_SIZE = 65_536


class TraceDataset(StrictModel):
    """A request trace uploaded to the site, replayed as recorded: ``kind`` names its
    format (``mooncake`` JSONL, ``burstgpt`` CSV, ``azure`` CSV; ``agents.workloads``).

    Open-loop levels send its requests at the trace's own times, scaled so that the window's
    mean rate is the level's request rate (the trace's shape at that rate; ``"inf"`` sends
    them all at once); closed-loop levels send its requests in order, as fast as their
    clients allow. ``start_seconds`` and ``duration_seconds`` choose the window of the trace
    replayed (all of it by default). ``block_size``: the tokens each Mooncake hash id stands
    for. ``model`` and ``log_type`` keep only those BurstGPT rows.
    """

    kind: TraceFormat
    dataset_id: UUID = Field(strict=False)
    start_seconds: float = Field(
        default=0.0, ge=0, le=MAX_TRACE_OFFSET_SECONDS, allow_inf_nan=False
    )
    duration_seconds: float | None = Field(
        default=None, gt=0, le=MAX_TRACE_OFFSET_SECONDS, allow_inf_nan=False
    )
    block_size: int = Field(default=MOONCAKE_BLOCK_SIZE, ge=1, le=MAX_BLOCK_SIZE)
    model: str | None = Field(default=None, min_length=1, max_length=100)
    log_type: BurstGptLogType | None = None

    @field_validator("model", "log_type")
    @classmethod
    def _burstgpt_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("kind") not in (None, "burstgpt"):
            raise PydanticCustomError(
                "burstgpt_only",
                "{field} filters BurstGPT rows; {kind} traces have none",
                {"field": info.field_name, "kind": info.data.get("kind")},
            )
        return value


MAX_SESSION_TURNS = 1000
# A user who thinks longer than an hour between turns has left.
MAX_THINK_SECONDS = 3600.0


class ChatSessionsDataset(StrictModel):
    """Multi-turn chat sessions, sent through the chat endpoint.

    A session has from ``min_turns`` to ``max_turns`` turns (uniform). Each turn sends the
    session's whole history — a system prompt of ``system_len`` tokens shared by every
    session (none when 0), each earlier user message and the model's replies as the server
    gave them — plus a new user message of ``user_len`` tokens, asking for ``output_len``
    tokens (both within ``± range_ratio``). After a reply the user thinks for an exponential
    time of mean ``think_seconds`` (0: none) before the next turn. A level's
    ``concurrency`` is concurrent sessions (a session that ends is followed by a new one);
    its ``request_rates`` are new sessions per second.
    """

    kind: Literal["chat_sessions"] = "chat_sessions"
    min_turns: int = Field(default=2, ge=1, le=MAX_SESSION_TURNS)
    max_turns: int = Field(default=6, ge=1, le=MAX_SESSION_TURNS)
    system_len: int = Field(default=0, ge=0, le=MAX_INPUT_LEN)
    user_len: InputLen
    output_len: OutputLen
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)
    think_seconds: float = Field(default=0.0, ge=0, le=MAX_THINK_SECONDS, allow_inf_nan=False)

    @field_validator("max_turns")
    @classmethod
    def _at_least_min_turns(cls, max_turns: int, info: ValidationInfo) -> int:
        min_turns = info.data.get("min_turns")
        if min_turns is not None and max_turns < min_turns:
            raise PydanticCustomError(
                "turns_order", "must be at least min_turns ({min_turns})", {"min_turns": min_turns}
            )
        return max_turns

    def longest_context(self) -> int:
        """The most tokens one request of a session carries in and out: the system prompt,
        every turn's message and reply at their longest."""
        longest_user = int(self.user_len * (1 + self.range_ratio))
        longest_output = int(self.output_len * (1 + self.range_ratio))
        return self.system_len + self.max_turns * (longest_user + longest_output)


class AgenticDataset(StrictModel):
    """Agentic coding sessions, synthesized (``agents.workloads.agentic``).

    Every agent's context starts with a system prompt and tool definitions of
    ``system_len`` tokens shared by every session, then its task (``task_len``). A session's
    main agent runs ``min_turns``–``max_turns`` turns: each sends the whole context and asks
    for ``output_len`` tokens; the output and a tool's result (``tool_output_len``) join the
    context, and the next turn follows ``tool_seconds`` later (exponential mean). With
    probability ``subagent_probability`` a turn also starts ``subagents`` sub-agents (each
    its own task on the same system prompt, ``subagent_turns`` turns in a chain); the next
    main turn waits for them. Shared context is shared text in blocks of ``block_size``
    tokens, so a server's prefix cache sees it. A level's ``concurrency`` is concurrent
    sessions, its ``request_rates`` new sessions per second.
    """

    kind: Literal["agentic"] = "agentic"
    min_turns: int = Field(default=4, ge=1, le=MAX_SESSION_TURNS)
    max_turns: int = Field(default=12, ge=1, le=MAX_SESSION_TURNS)
    system_len: int = Field(default=8000, ge=0, le=MAX_INPUT_LEN)
    task_len: InputLen = 500
    output_len: OutputLen = 300
    tool_output_len: int = Field(default=1500, ge=0, le=MAX_INPUT_LEN)
    tool_seconds: float = Field(default=1.0, ge=0, le=MAX_THINK_SECONDS, allow_inf_nan=False)
    subagent_probability: float = Field(default=0.1, ge=0, le=1, allow_inf_nan=False)
    subagents: int = Field(default=2, ge=0, le=64)
    subagent_turns: int = Field(default=3, ge=1, le=MAX_SESSION_TURNS)
    block_size: int = Field(default=64, ge=1, le=MAX_BLOCK_SIZE)

    @field_validator("max_turns")
    @classmethod
    def _at_least_min_turns(cls, max_turns: int, info: ValidationInfo) -> int:
        return ChatSessionsDataset._at_least_min_turns(max_turns, info)

    def longest_context(self) -> int:
        """The most tokens one request carries in and out: the main agent's last turn."""
        grows = self.output_len + self.tool_output_len
        return self.system_len + self.task_len + (self.max_turns - 1) * grows + self.output_len


class AgenticTraceDataset(StrictModel):
    """Agentic sessions uploaded as a session JSONL file (``agents.workloads.agentic``: one
    request a line with its session, parents, delay, lengths and hash ids), replayed with
    their dependencies: a request starts its delay after its parents finished. Open-loop
    levels start the sessions at the file's times scaled to the level's rate (sessions per
    second); closed-loop levels keep that many sessions open, in the file's order."""

    kind: Literal["agentic_trace"] = "agentic_trace"
    dataset_id: UUID = Field(strict=False)
    block_size: int = Field(default=MOONCAKE_BLOCK_SIZE, ge=1, le=MAX_BLOCK_SIZE)


Dataset = Annotated[
    RandomDataset
    | ShareGptDataset
    | PrefixDataset
    | TraceDataset
    | ChatSessionsDataset
    | AgenticDataset
    | AgenticTraceDataset,
    Field(discriminator="kind"),
]


def _request_rate(value: object, handler: ValidatorFunctionWrapHandler) -> float | str:
    try:
        return handler(value)
    except pydantic.ValidationError:
        # One message for the whole union instead of one per member ("should be 'inf'"...).
        raise PydanticCustomError(
            "request_rate",
            'expected a number from {low} to {high} or "inf"; got {value}',
            {
                "value": json_literal(value),
                "low": f"{REQUEST_RATE_RANGE[0]:g}",
                "high": f"{REQUEST_RATE_RANGE[1]:g}",
            },
        ) from None


RequestRate = Annotated[RequestRateNumber | Literal["inf"], WrapValidator(_request_rate)]


def _duplicates_error(
    title: str, field: str, values: Sequence[object]
) -> pydantic.ValidationError | None:
    first: dict[object, int] = {}
    details: list[InitErrorDetails] = []
    for index, value in enumerate(values):
        if value in first:
            details.append(
                InitErrorDetails(
                    type=PydanticCustomError(
                        "duplicate_level",
                        "duplicate of {field}[{first}] ({value})",
                        {"field": field, "first": first[value], "value": json_literal(value)},
                    ),
                    loc=(index,),
                    input=value,
                )
            )
        else:
            first[value] = index
    if not details:
        return None
    # A ValidationError raised in a field validator keeps its locations, relative to the
    # field: the duplicate is reported on its own index.
    return pydantic.ValidationError.from_exception_data(title, details)


class CapacitySearch(StrictModel):
    """Find each trial's capacity at the SLOs: the highest concurrency (``axis``
    ``"concurrency"``, closed loop) or request rate (``"request_rate"``, open loop) at which
    every objective holds. The fixed levels already measured bracket it first; then at most
    ``max_probes`` extra steady levels (doubling or halving until a pass and a fail bracket
    it, then monotone interpolation of the SLO margin, or bisection) narrow it down, until
    the bracket is within ``tolerance_pct`` (or one user, for concurrency). With
    ``repeat_bracket`` the bracket's two ends are measured once more (not counted in
    ``max_probes``): a capacity that holds only once is not a capacity. ``max_load`` bounds
    the search from above."""

    axis: Literal["concurrency", "request_rate"] = "concurrency"
    max_probes: int = Field(default=6, ge=1, le=MAX_CAPACITY_PROBES)
    tolerance_pct: float = Field(default=5.0, gt=0, le=100, allow_inf_nan=False)
    repeat_bracket: bool = True
    max_load: float | None = Field(
        default=None, ge=1, le=float(MAX_CONCURRENCY), allow_inf_nan=False
    )


class Workload(StrictModel):
    """The load applied to every trial: a dataset, an endpoint and the load levels.

    Levels are the ``concurrency`` values (requests in flight, capped) followed by the
    ``request_rates`` (requests per second with gamma-distributed gaps of shape
    ``burstiness``; ``"inf"`` sends all at once); at most ``MAX_LOAD_LEVELS`` in all, no
    value twice in a list, and at least one unless ``capacity`` searches for them.

    Every level is *steady*: a ramp (the first wave of a closed-loop level, or the time
    until the first answer of an open-loop one; ``ramp_up_seconds`` staggers the start),
    then a measurement window that runs until it holds at least ``requests_per_level`` and
    ``steady_multiple`` × the concurrency completions (or, with ``level_seconds``, until
    that many seconds from the level's start), then a drain. ``warmup_requests``
    unmeasured ones go before each level. A level whose SLO verdict is too close to call is
    measured again, up to ``max_extensions`` times. ``seed`` fixes the traffic (prompts, lengths,
    arrival times) for every run of the experiment; without it each run draws one, and all
    trials of a run see the same traffic either way.
    """

    dataset: Dataset
    # Validated when absent too: chat sessions need the chat endpoint.
    endpoint: Literal["completions", "chat"] = Field(default="completions", validate_default=True)
    # Declared before `concurrency` because the concurrency validator reads them.
    capacity: CapacitySearch | None = None
    request_rates: list[RequestRate] = Field(default_factory=list, max_length=MAX_LOAD_LEVELS)
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(
        default_factory=list, max_length=MAX_LOAD_LEVELS, validate_default=True
    )
    burstiness: float = Field(
        default=1.0, ge=BURSTINESS_RANGE[0], le=BURSTINESS_RANGE[1], allow_inf_nan=False
    )
    requests_per_level: int = Field(default=200, ge=1, le=1_000_000)
    warmup_requests: int = Field(default=0, ge=0, le=100_000)
    steady_multiple: float = Field(default=4.0, ge=0, le=1000, allow_inf_nan=False)
    ramp_up_seconds: float = Field(default=0.0, ge=0, le=MAX_RAMP_SECONDS, allow_inf_nan=False)
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    repeats: int = Field(default=1, ge=1, le=MAX_LEVEL_REPEATS)
    # How often a level too close to call at the SLOs' confidence is measured again (its
    # counts pooled) before it counts as not met; estimates and budgets count them.
    max_extensions: int = Field(default=2, ge=0, le=MAX_LEVEL_REPEATS)
    level_seconds: float | None = Field(
        default=None, gt=0, le=MAX_LEVEL_SECONDS, allow_inf_nan=False
    )

    @field_validator("endpoint")
    @classmethod
    def _sessions_chat(cls, endpoint: str, info: ValidationInfo) -> str:
        dataset = info.data.get("dataset")
        if isinstance(dataset, ChatSessionsDataset) and endpoint != "chat":
            raise PydanticCustomError(
                "sessions_need_chat", "chat sessions are sent to the chat endpoint: use 'chat'"
            )
        return endpoint

    @field_validator("request_rates")
    @classmethod
    def _rates_distinct(cls, rates: list[float | str]) -> list[float | str]:
        error = _duplicates_error(cls.__name__, "request_rates", rates)
        if error is not None:
            raise error
        return rates

    @field_validator("concurrency")
    @classmethod
    def _concurrency_levels(cls, concurrency: list[int], info: ValidationInfo) -> list[int]:
        error = _duplicates_error(cls.__name__, "concurrency", concurrency)
        if error is not None:
            raise error
        # Absent when request_rates itself was refused: its own error says enough.
        if "request_rates" in info.data:
            rates = info.data["request_rates"]
            # A capacity search brings levels of its own (unless it was refused itself).
            searches = info.data.get("capacity") is not None or "capacity" not in info.data
            if not concurrency and not rates and not searches:
                raise PydanticCustomError(
                    "no_load_levels",
                    "give at least one load level: a concurrency or a request rate "
                    "(or a capacity search)",
                )
            if len(concurrency) + len(rates) > MAX_LOAD_LEVELS:
                raise PydanticCustomError(
                    "too_many_load_levels",
                    "concurrency and request_rates list {count} levels together; "
                    "at most {limit} are allowed",
                    {"count": len(concurrency) + len(rates), "limit": MAX_LOAD_LEVELS},
                )
        return concurrency


# `ttft:p95<300ms`, `tpot<50ms` (p99), `attainment>=95%`: one objective of the text form.
_SLO_TEXT = re.compile(
    r"^\s*(?P<metric>[a-z0-9]+)\s*(?::\s*p(?P<percentile>\d+))?\s*"
    r"(?P<op><=|<|>=)\s*(?P<value>[0-9]+(?:\.[0-9]+)?)\s*(?P<unit>ms|s|%)?\s*$",
    re.IGNORECASE,
)


class Slos(StrictModel):
    """Service-level objectives, each optional: a latency target in milliseconds per metric
    (names as ``vllm bench serve``: TTFT, TPOT, ITL, E2EL), judged at the percentile it names
    (``ttft_percentile``: 50, 90, 95 or 99; p99 when not given), and optionally an
    attainment: at least ``min_attainment_pct`` % of the requests meet every latency target
    (a request counts as goodput defines it). A level meets the SLOs when every one holds.
    The text form is ``ttft:p95<300ms, tpot<50ms, attainment>=95%`` (``parse_slos``).
    Each objective is judged met, missed or too close to call at ``confidence_pct``
    (``agents.protocol.slo_verdicts``), never on one percentile's point value."""

    ttft_ms: SloMs | None = None
    tpot_ms: SloMs | None = None
    itl_ms: SloMs | None = None
    e2el_ms: SloMs | None = None
    ttft_percentile: SloPercentile | None = None
    tpot_percentile: SloPercentile | None = None
    itl_percentile: SloPercentile | None = None
    e2el_percentile: SloPercentile | None = None
    min_attainment_pct: float | None = Field(default=None, gt=0, le=100, allow_inf_nan=False)
    # How sure a verdict must be before a level counts as met or missed (else: too close to
    # call, measured longer): ``agents.protocol.slo_verdicts``; 95 when not given.
    confidence_pct: float | None = Field(default=None, ge=50, le=99.9, allow_inf_nan=False)

    @property
    def confidence(self) -> float:
        """The confidence of every verdict, in % (95 when not given)."""
        return self.confidence_pct if self.confidence_pct is not None else DEFAULT_CONFIDENCE_PCT

    def requests_to_judge(self) -> int:
        """The fewest requests a level must measure before its strictest objective can be
        met at ``confidence`` (0 without objectives): p99 at 95 % needs 299."""
        needed = [
            requests_to_judge(self.percentile(metric), self.confidence)
            for metric in self.latency_targets
        ]
        if self.min_attainment_pct is not None:
            needed.append(requests_to_judge(self.min_attainment_pct, self.confidence))
        return max(needed, default=0)

    def target_ms(self, metric: str) -> float | None:
        """The latency target of ``metric`` (``"ttft"`` …), or None when it has none."""
        return getattr(self, f"{metric}_ms")

    def percentile(self, metric: str) -> int:
        """The percentile the ``metric``'s target is judged at (99 when not given)."""
        return getattr(self, f"{metric}_percentile") or 99

    @property
    def latency_targets(self) -> dict[str, float]:
        """Every latency target given, by metric, in ``LATENCY_METRICS`` order."""
        return {m: t for m in LATENCY_METRICS if (t := self.target_ms(m)) is not None}

    @property
    def given(self) -> bool:
        """Whether any objective is given."""
        return bool(self.latency_targets) or self.min_attainment_pct is not None

    def scaled(self, factor: float) -> Slos:
        """The same objectives with every latency target multiplied by ``factor``."""
        return self.model_copy(
            update={f"{m}_ms": t * factor for m, t in self.latency_targets.items()}
        )

    def describe(self) -> str:
        """The text form (``ttft:p95<300ms, attainment>=95%``), or ``""`` for none."""
        parts = [f"{m}:p{self.percentile(m)}<{t:g}ms" for m, t in self.latency_targets.items()]
        if self.min_attainment_pct is not None:
            parts.append(f"attainment>={self.min_attainment_pct:g}%")
        return ", ".join(parts)


def parse_slos(text: str) -> Slos:
    """``ttft:p95<300ms, tpot<50ms, e2el:p99<10s, attainment>=95%`` (comma-separated; the
    percentile defaults to p99; ``ttft_ms=300`` is also accepted) as ``Slos``. Raises
    ``ValueError`` naming the part it cannot read, or pydantic's ``ValidationError`` for a
    value out of range."""
    values: dict[str, object] = {}
    for part in (piece for piece in text.split(",") if piece.strip()):
        name, equals, raw = part.partition("=")
        if equals and not name.rstrip().endswith((">", "<")):
            # The key=value form: ttft_ms=300, min_attainment_pct=95, ttft_percentile=95.
            try:
                number = float(raw)
            except ValueError:
                raise ValueError(f"{part.strip()!r}: {raw.strip()!r} is not a number") from None
            values[name.strip()] = int(number) if name.strip().endswith("_percentile") else number
            continue
        match = _SLO_TEXT.match(part)
        if match is None:
            raise ValueError(
                f"{part.strip()!r}: expected METRIC[:pNN]<VALUE(ms|s) or attainment>=PCT%"
            )
        metric, value = match["metric"].lower(), float(match["value"])
        if metric == "attainment":
            if match["op"] != ">=" or match["percentile"] or match["unit"] not in (None, "%"):
                raise ValueError(f"{part.strip()!r}: write attainment>=PCT%")
            values["min_attainment_pct"] = value
            continue
        if metric not in LATENCY_METRICS:
            raise ValueError(f"{part.strip()!r}: the metric is one of {', '.join(LATENCY_METRICS)}")
        if match["op"] == ">=" or match["unit"] == "%":
            raise ValueError(f"{part.strip()!r}: a latency objective is METRIC<VALUE ms")
        values[f"{metric}_ms"] = value * 1000 if match["unit"] == "s" else value
        if match["percentile"]:
            values[f"{metric}_percentile"] = int(match["percentile"])
    return Slos.model_validate(values)


def steady_window_requests(
    requests_per_level: int,
    steady_multiple: float,
    concurrency: int | None,
    slos: Slos | None = None,
) -> int:
    """How many completions a steady level's window must hold: ``requests_per_level``, at
    least ``steady_multiple`` × the concurrency (a closed-loop level; none for a rate), and
    enough to judge the SLOs' strictest objective (``Slos.requests_to_judge``)."""
    judge = slos.requests_to_judge() if slos is not None else 0
    return max(requests_per_level, math.ceil(steady_multiple * (concurrency or 0)), judge)


def level_requests(workload: Workload, level: dict, slos: Slos | None = None) -> int:
    """About how many requests one steady level of ``workload`` sends under ``slos``: its
    window, plus the ramp's first wave and the drain (one concurrency each) of a closed-loop
    level, plus the warm-up. What estimates and deadlines count."""
    concurrency = level.get("concurrency")
    window = steady_window_requests(
        workload.requests_per_level, workload.steady_multiple, concurrency, slos
    )
    return window + 2 * (concurrency or 0) + workload.warmup_requests


def capacity_probe_levels(workload: Workload) -> list[dict[str, int | float | str]]:
    """The levels a capacity search may add to each trial, for estimates: at most
    ``max_probes``, the bracket's two repeats, and ``max_extensions`` more for the load at
    the edge that is too close to call, counted at the heaviest fixed level of the search's
    axis (or 64 users / 8 requests per second when there is none)."""
    search = workload.capacity
    if search is None:
        return []
    count = search.max_probes + (2 if search.repeat_bracket else 0) + workload.max_extensions
    if search.axis == "concurrency":
        level: dict = {"concurrency": max(workload.concurrency, default=64)}
    else:
        finite = [rate for rate in workload.request_rates if rate != "inf"]
        level = {"request_rate": max(finite, default=8.0)}
    return [level] * count


def workload_levels(workload: Workload) -> list[dict[str, int | float | str]]:
    """The load levels of a workload in the order they run: ``{"concurrency": n}`` for each
    concurrency as given, then ``{"request_rate": r}`` for each rate (``"inf"`` stays the
    string ``"inf"``, so a level is always plain JSON). Each is listed once, however many
    ``repeats`` it has."""
    levels: list[dict[str, int | float | str]] = [
        {"concurrency": concurrency} for concurrency in workload.concurrency
    ]
    levels.extend({"request_rate": rate} for rate in workload.request_rates)
    return levels
