"""``LevelResult``: what one finished load level measured, as ``MeasurementReport.result``
carries it: the keys of ``vllm bench serve``'s result JSON plus Benchsite's own.

Guarantees:

- Strict as every protocol model (no unknown key, no coercion), with the numeric bounds
  protocol 2 gave the free-form result: every number finite, every integer within the
  site's ``bigint`` column.
- Only ``completed``, ``failed`` and ``duration`` are required, as they were for protocol 1
  and 2 agents; every other figure may be absent (None).
- A result dumps to what was sent: keys the agent did not send are left out again, so a
  stored message's digest (and a resend's) is that of the agent's own JSON.
"""

from __future__ import annotations

from typing import Annotated, Literal

import pydantic
from pydantic import Field

from agents.protocol.fields import BIGINT_COLUMN_MAX, FiniteFloat
from agents.protocol.strict import StrictModel
from figures.level_results import DURATION, LATENCY_FIGURES, RATE_FIGURES, latency_field

# An integer figure: within the site's bigint column, as protocol 2's free-form JSON was.
Integer = Annotated[int, Field(ge=-BIGINT_COLUMN_MAX, le=BIGINT_COLUMN_MAX)]


class AsSent(StrictModel):
    """A model that dumps only the fields that were given to it (defaults stay unset)."""

    @pydantic.model_serializer(mode="wrap")
    def _as_sent(self, handler: pydantic.SerializerFunctionWrapHandler) -> dict:
        dumped = handler(self)
        return {key: value for key, value in dumped.items() if key in self.model_fields_set}


class ErrorCount(AsSent):
    """Requests that failed one way: how many, and one of their messages."""

    count: Integer
    sample: str | None = None


class OutputLenMismatch(AsSent):
    """Requests served another number of tokens than they asked for."""

    requests: Integer
    requested_tokens: Integer
    served_tokens: Integer
    sample: str = ""


class SloCheck(AsSent):
    """One objective against the level: a latency target against the percentile it names
    (``percentile``, ``value``; ``p99`` is always the level's p99, as protocol 2 sent it), or
    the attainment (``target`` and ``value`` in % of requests meeting every latency target).
    ``judged`` requests (ITL: gaps) were counted, ``beyond`` of them did not meet it, and
    ``spans`` holds ``[beyond, judged]`` per span of the window in the order sent; the
    ``verdict`` at the SLOs' confidence (``agents.protocol.slo_verdicts``) is met, missed or
    too close to call, and ``met`` is true only for a confident "met". Results stored before
    verdicts carry neither, and their ``met`` is the point estimate's."""

    target: FiniteFloat
    p99: FiniteFloat | None = None
    percentile: Integer | None = None
    value: FiniteFloat | None = None
    met: bool
    judged: Integer | None = None
    beyond: Integer | None = None
    spans: list[Annotated[list[Integer], Field(min_length=2, max_length=2)]] | None = None
    verdict: Literal["met", "missed", "too_close"] | None = None
    confidence_pct: FiniteFloat | None = None


class SimulatedTime(AsSent):
    """The level ran on the simulator, its times scaled by ``speed``; ``clock`` "simulated":
    computed in the simulator's own time (a pure function of the job and its seeds), left
    out when it was measured over HTTP in wall time."""

    speed: FiniteFloat
    clock: Literal["simulated"] | None = None


class SteadyWindow(AsSent):
    """Where a level's measurement window lay, in seconds from the level's start, and how
    many requests fell before it (ramp), inside it and after it (drain)."""

    start_s: FiniteFloat
    end_s: FiniteFloat
    requests: Integer
    ramp_requests: Integer
    drain_requests: Integer


class SendLateness(AsSent):
    """How late an open-loop level's requests left against their schedule: the actual send
    minus the scheduled one, in milliseconds (the load generator's own accuracy; a late send
    delays the request but not its measured TTFT, which starts at the actual send)."""

    p50_ms: FiniteFloat
    p99_ms: FiniteFloat
    max_ms: FiniteFloat


class TraceReplay(AsSent):
    """What a trace level sent: the window's ``requests`` (each once, at the trace's times
    for a request rate; in order for a concurrency), the window's own mean rate
    (``trace_rate``, requests/s; None when they all arrive at once) and ``time_scale``, the
    factor the trace's times were multiplied by to reach the level's rate (None for a
    concurrency or an ``inf`` rate)."""

    requests: Integer
    trace_rate: FiniteFloat | None = None
    time_scale: FiniteFloat | None = None


class TurnFigures(AsSent):
    """One turn index of a chat-session level, over every request of the level at that turn
    (1 is a session's first): how many, how long their prompts were (the server's count),
    and their TTFT and TPOT. A later turn carries more history, so its prompt is longer and
    more of it can come from the prefix cache."""

    turn: Integer
    requests: Integer
    completed: Integer
    mean_prompt_tokens: FiniteFloat | None = None
    median_ttft_ms: FiniteFloat | None = None
    p99_ttft_ms: FiniteFloat | None = None
    median_tpot_ms: FiniteFloat | None = None


class Interval(AsSent):
    """A 95 % confidence interval."""

    low: FiniteFloat
    high: FiniteFloat


def _optional_figures(names: tuple[str, ...]) -> dict:
    return {name: (FiniteFloat | None, None) for name in names}


# The figures' fields, declared from their names (``figures.level_results``: the CLI reads a
# result by the same names), in the order ``vllm bench serve`` writes them.
_LevelFigureFields = pydantic.create_model(
    "_LevelFigureFields",
    __base__=AsSent,
    __module__=__name__,
    **{DURATION: (FiniteFloat, ...)},
    completed=(Integer, ...),
    failed=(Integer, ...),
    total_input_tokens=(Integer | None, None),
    total_output_tokens=(Integer | None, None),
    **_optional_figures(RATE_FIGURES),
    max_concurrent_requests=(Integer | None, None),
    **_optional_figures(LATENCY_FIGURES),
)


class LevelFigures(_LevelFigureFields):
    """Counts, throughputs and latency statistics in milliseconds (``p99_ttft_ms``, …) as
    ``vllm bench serve`` names them, over one set of requests."""

    def latency_ms(self, statistic: str, metric: str) -> float | None:
        """``latency_ms("p99", "ttft")`` is ``p99_ttft_ms``: one statistic of one metric."""
        return getattr(self, latency_field(statistic, metric))


class LevelResult(LevelFigures):
    """One finished load level. Its headline figures (the ``LevelFigures``) describe the
    steady ``window`` (ramp and drain excluded); ``whole_level`` holds the same figures over
    every request of the level, as ``vllm bench serve`` computes them. ``ci95`` gives 95 %
    confidence intervals of headline figures by their field name. A level measured by a
    capacity search is a ``probe``; ``repeat`` counts earlier runs of the same level."""

    # The level itself, as the load generator echoes it.
    concurrency: Integer | None = None
    request_rate: FiniteFloat | Literal["inf"] | None = None
    burstiness: FiniteFloat | None = None

    window: SteadyWindow | None = None
    whole_level: LevelFigures | None = None
    ci95: dict[str, Interval] | None = None
    slo_attainment_pct: FiniteFloat | None = None
    probe: bool | None = None
    repeat: Integer | None = None
    # The level was too close to call and measured again: this is its n-th extension.
    extension: Integer | None = None

    errors: dict[str, ErrorCount] | None = None
    output_len_mismatch: OutputLenMismatch | None = None
    usage_missing: Integer | None = None
    slo: dict[str, SloCheck] | None = None
    # The level was cut short (a cancel, the deadline): figures of the requests that ended.
    partial: bool | None = None
    aborted: Integer | None = None
    simulated: SimulatedTime | None = None
    # Protocol 6: an open-loop level's send accuracy, a trace level's replay and a chat
    # session level's figures by turn.
    send_lateness: SendLateness | None = None
    replay: TraceReplay | None = None
    turns: list[TurnFigures] | None = None
    # Requests of the level sent to each LoRA adapter, by its name (a run with adapters).
    lora_requests: dict[str, Integer] | None = Field(default=None, max_length=64)


class FieldNames:
    """A protocol model's field names as attributes: ``LEVEL_RESULT_KEY.completed`` is
    ``"completed"``. For readers of the JSON a model dumps (the site reads a stored result's
    keys in SQL, and as a dict where a typed read would cost): a name the model has not
    raises AttributeError instead of silently reading nothing."""

    def __init__(self, model: type[pydantic.BaseModel]):
        self.__dict__.update({name: name for name in model.model_fields})


LEVEL_RESULT_KEY = FieldNames(LevelResult)
SLO_CHECK_KEY = FieldNames(SloCheck)
