"""Agent ↔ site messages: what an agent reports (``AgentMessage``, one of eleven types,
each carrying its run, epoch and ``seq``), what the site answers (``Ack``, ``Rejected``,
``EpochGrant``, ``Cancel``), and how a refused message is described."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Literal, get_args

import pydantic
from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)

from agents.protocol.capacity import CapacityResult
from agents.protocol.errors import FieldError
from agents.protocol.evaluation import (
    MAX_EVALUATION_PART_ITEMS,
    MAX_EVALUATION_PARTS,
    EvaluationItemResult,
    EvaluationSummary,
)
from agents.protocol.fields import (
    BIGINT_COLUMN_MAX,
    MAX_EPOCH,
    Count,
    EpochNumber,
    FiniteFloat,
    FiniteJson,
    RunId,
    SeqNumber,
    TrialIndex,
)
from agents.protocol.gpu import GpuLevel, GpuReadings
from agents.protocol.level_result import LevelResult
from agents.protocol.pydantic_errors import join_path, readable_message
from agents.protocol.strict import StrictModel
from agents.protocol.workload import MAX_CONCURRENCY, PositiveFloat

# Bump when an agent message gains a field, or a field changes meaning, so that each side
# can tell what the other speaks. The site accepts every version ``AgentMessageBase.protocol``
# lists. 2: ``epoch`` (the agent's site-issued sequence space; protocol 1 is epoch 0).
# 3: steady windows, SLO percentiles and attainment in level results; ``capacity`` in
# ``trial_finished``. 4: trial failure classes ``model_access_denied`` and ``disk_too_small``;
# the ``weights_downloaded`` cold-start phase (a duration, before the engine's process starts);
# ``engine_restarted`` (self-heal) and the failure class ``hang``. 5: ``search_finished``.
# 6: level results carry ``send_lateness``, ``replay`` and ``turns``; trace and chat-session
# datasets in the job. 7: GPU telemetry: ``gpus`` in ``level_progress`` (each GPU's latest
# reading) and in ``measurement`` (each GPU's mean and max over the level). 8: ``evaluation``
# (a trial's evaluation: per-item outcomes and the score with its interval).
PROTOCOL_VERSION = 8
MAX_LOG_TAIL_CHARS = 64 * 1024


class Level(StrictModel):
    """One load level: a closed-loop concurrency or an open-loop request rate ("inf": all
    requests at once)."""

    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] | None = None
    request_rate: PositiveFloat | Literal["inf"] | None = None

    @pydantic.model_validator(mode="after")
    def _exactly_one(self) -> Level:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of concurrency and request_rate")
        return self


def _tag_required(schema: dict) -> None:
    """The schema of an agent message, with ``type`` required and no default: on the wire it
    is the message's tag, and a message without one is refused. (Its default only spares the
    agent's code from naming the type twice.)"""
    schema["properties"]["type"].pop("default", None)
    required = {*schema.get("required", ()), "type"}
    schema["required"] = [name for name in schema["properties"] if name in required]


class AgentMessageBase(StrictModel):
    """Agent → site. Every message names its run, the sequence space of the agent that sent
    it (``epoch``: issued by the site to each agent start without its spool, see
    ``EpochGrant``) and a sequence number unique within that space. The site stores each
    ``(run_id, epoch, seq)`` once: a resend with the same content is acknowledged again, one
    with other content is refused as a conflict. Epoch 0 is the space of protocol 1 agents
    and of agents without a site. Each subclass's ``type`` defaults to its own tag."""

    model_config = pydantic.ConfigDict(json_schema_extra=_tag_required)

    protocol: Literal[1, 2, 3, 4, 5, 6, 7, 8] = PROTOCOL_VERSION
    run_id: RunId
    epoch: EpochNumber = 0
    seq: SeqNumber
    sent_at: FiniteFloat | None = None  # agent's wall clock (Unix seconds), for delay figures

    @field_validator("epoch")
    @classmethod
    def _epochs_need_protocol_2(cls, epoch: int, info: ValidationInfo) -> int:
        if epoch and info.data.get("protocol") == 1:
            raise ValueError("protocol 1 has no epochs; send protocol 2")
        return epoch


class GpuInfo(StrictModel):
    name: str = Field(max_length=200)
    memory_mib: Count


class HostFacts(StrictModel):
    """What the agent found about the machine it runs on."""

    hostname: str = Field(default="", max_length=255)
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=64)
    driver_version: str | None = Field(default=None, max_length=100)
    cuda_version: str | None = Field(default=None, max_length=100)
    # The CUDA the image's PyTorch was built with (``torch.version.cuda``, else the image's
    # CUDA_VERSION); ``cuda_version`` is the newest the driver supports.
    image_cuda_version: str | None = Field(default=None, max_length=100)
    vllm_version: str | None = Field(default=None, max_length=100)
    cpu_count: Count | None = None
    pod_id: str | None = Field(default=None, max_length=100)


class Hello(AgentMessageBase):
    """The agent is up: who it is and what it runs on. Sent first, once per agent start."""

    type: Literal["hello"] = "hello"
    agent_version: str = Field(max_length=100)
    host: HostFacts


class Heartbeat(AgentMessageBase):
    """The agent is alive (about every 10 s); a silent agent is reaped by the site."""

    type: Literal["heartbeat"] = "heartbeat"
    trial: TrialIndex | None = None


class TrialStarted(AgentMessageBase):
    """A trial's engine is being started with exactly this configuration and argv."""

    type: Literal["trial_started"] = "trial_started"
    trial: TrialIndex
    serve_config: FiniteJson
    command: list[Annotated[str, Field(max_length=4096)]] = Field(max_length=512)


# The one cold-start phase that is a duration before the engine starts, not a time since.
WEIGHTS_PHASE = "weights_downloaded"


class ColdStartPhase(AgentMessageBase):
    """A cold-start phase was observed: seconds from the engine's process start; for
    ``weights_downloaded`` (the run's first trial, before its engine starts) how long fetching
    the weights took, with ``bytes``, ``mb_per_s`` and ``cached`` in ``detail``."""

    type: Literal["cold_start_phase"] = "cold_start_phase"
    trial: TrialIndex
    phase: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    detail: FiniteJson = Field(default_factory=dict)


class LevelProgress(AgentMessageBase):
    """Live figures of the running level (throttled to about 2 per second)."""

    type: Literal["level_progress"] = "level_progress"
    trial: TrialIndex
    level: Level
    requests_done: Count
    requests_total: Count | None = None
    ttft_ms_p50: FiniteFloat | None = None
    ttft_ms_p99: FiniteFloat | None = None
    itl_ms_p50: FiniteFloat | None = None
    itl_ms_p99: FiniteFloat | None = None
    output_tokens_per_s: FiniteFloat | None = None
    kv_cache_usage: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    num_requests_waiting: Count | None = None
    # Each GPU's latest NVML reading (None: no GPU telemetry on this host, or a simulator).
    gpus: GpuReadings | None = None


class MeasurementReport(AgentMessageBase):
    """One finished load level of one trial: the load generator's result (``LevelResult``:
    the ``vllm bench serve`` keys and ours), the server's metrics and each GPU's telemetry
    over the level (``gpus``; None where the host has none)."""

    type: Literal["measurement"] = "measurement"
    trial: TrialIndex
    level: Level
    result: LevelResult
    server: FiniteJson = Field(default_factory=dict)
    gpus: GpuLevel | None = None


TRIAL_FAILURE_CLASSES = (
    "oom_at_startup",
    "kv_cache_too_small",
    "unsupported_flag",
    "model_not_found",
    "model_access_denied",
    "disk_too_small",
    "startup_timeout",
    "crash",
    "hang",
    "deadline",
    "cuda_driver_too_old",
    "other",
)


class EngineRestarted(AgentMessageBase):
    """A trial's engine died (``crash``) or stopped answering (``hang``) in the middle of its
    measuring and was started again with the same configuration (``attempt``: the restart's
    number, from 1); the level it cut short (``level``) runs again from its start, and its
    requests up to the failure (``requests_lost``) are in no measurement."""

    type: Literal["engine_restarted"] = "engine_restarted"
    trial: TrialIndex
    attempt: Annotated[int, Field(ge=1, le=10)]
    failure_class: Literal["crash", "hang"]
    level: Level | None = None
    requests_lost: Count = 0
    log_tail: str = Field(default="", max_length=MAX_LOG_TAIL_CHARS)


class TrialFinished(AgentMessageBase):
    """A trial ended; a failed one says why, with the log lines that show it; one whose
    workload searched for its capacity at the SLOs carries what the search found."""

    type: Literal["trial_finished"] = "trial_finished"
    trial: TrialIndex
    outcome: Literal["succeeded", "failed", "skipped"]
    failure_class: Literal[TRIAL_FAILURE_CLASSES] | None = None  # type: ignore[valid-type]
    log_tail: str = Field(default="", max_length=MAX_LOG_TAIL_CHARS)
    capacity: CapacityResult | None = None


class TrialFate(StrictModel):
    """What a search made of one trial: ``winner`` (measured in full, the best), ``measured``
    (in full), ``eliminated`` (measured briefly in ``round``, behind the others), ``pruned``
    (never measured: the simulator's figure and why), ``not_reached`` (a limit or a stop came
    first). Figures are the search's value, output tokens/s at capacity under the SLOs:
    ``predicted`` with the simulator's defaults, ``calibrated`` after a calibration,
    ``measured`` at ``effort`` (1: the full workload)."""

    trial: TrialIndex
    fate: Literal["winner", "measured", "eliminated", "pruned", "not_reached"]
    round: Annotated[int, Field(ge=1, le=64)] | None = None
    predicted: FiniteFloat | None = None
    calibrated: FiniteFloat | None = None
    measured: FiniteFloat | None = None
    effort: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    reason: str = Field(default="", max_length=500)


class SearchCalibration(StrictModel):
    """The simulator's constants fitted to the run's measurements (``agents.search
    .calibration``); ``used``: False when it predicted the measured trials worse than the
    defaults (kept for the record, not used); the value's prediction error, mean absolute %,
    of the trials measured after it, with the defaults and with it."""

    constants: dict[str, FiniteFloat] = Field(max_length=16)
    used: bool
    fit_error_pct: FiniteFloat | None = None
    error_uncalibrated_pct: FiniteFloat | None = None
    error_calibrated_pct: FiniteFloat | None = None


class SearchFinished(AgentMessageBase):
    """A run's search is over (a job with ``search``): every trial's fate, the winner (a
    trial measured in full; None when none served), whether its lead over the runner-up is
    beyond both 95 % intervals (``decided``), the pod seconds spent measuring against what
    measuring every trial would take on the simulator's prediction, and the calibration."""

    type: Literal["search_finished"] = "search_finished"
    strategy: Literal["exhaustive", "prune", "halving", "bayes", "prune+halving"]
    fates: list[TrialFate] = Field(max_length=1024)
    winner: TrialIndex | None = None
    decided: bool = True
    measurements: Count = 0
    spent_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    exhaustive_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    stopped_by: Literal["spend_limit", "max_trials", "stop"] | None = None
    calibration: SearchCalibration | None = None
    # The run whose calibration the predictions started from (the job's ``search.prior``).
    prior_run: RunId | None = None


class EvaluationReport(AgentMessageBase):
    """A trial's evaluation on its served configuration, after its load levels (docs/
    quality.md): ``part`` of ``parts`` of its items' results (a large set goes in parts of
    at most ``MAX_EVALUATION_PART_ITEMS``), and the whole evaluation's ``summary`` in every
    part. The site keeps each item's latest result by its id, so a resent part changes
    nothing."""

    type: Literal["evaluation"] = "evaluation"
    trial: TrialIndex
    parts: Annotated[int, Field(ge=1, le=MAX_EVALUATION_PARTS)] = 1
    part: Annotated[int, Field(ge=0, lt=MAX_EVALUATION_PARTS)] = 0
    items: list[EvaluationItemResult] = Field(max_length=MAX_EVALUATION_PART_ITEMS)
    summary: EvaluationSummary

    @field_validator("part")
    @classmethod
    def _part_within_parts(cls, part: int, info: ValidationInfo) -> int:
        parts = info.data.get("parts")
        if parts is not None and part >= parts:
            raise ValueError(f"part must be below parts ({parts})")
        return part


class RunFinished(AgentMessageBase):
    """The agent is done with the run (all trials, a cancel, or its deadline)."""

    type: Literal["run_finished"] = "run_finished"
    outcome: Literal["succeeded", "failed", "cancelled", "deadline"]
    reason: str = Field(default="", max_length=2000)


AgentMessage = Annotated[
    Hello
    | Heartbeat
    | TrialStarted
    | ColdStartPhase
    | LevelProgress
    | MeasurementReport
    | EngineRestarted
    | TrialFinished
    | SearchFinished
    | EvaluationReport
    | RunFinished,
    Field(discriminator="type"),
]
_AGENT_MESSAGE = pydantic.TypeAdapter(AgentMessage)
# Every agent message's model, in the union's order.
AGENT_MESSAGE_MODELS: tuple[type[AgentMessageBase], ...] = get_args(get_args(AgentMessage)[0])


_AGENT_MESSAGE_TYPES = frozenset(cls.model_fields["type"].default for cls in AGENT_MESSAGE_MODELS)


def parse_agent_message(data: object) -> AgentMessage:
    """Validates one agent message (parsed JSON); raises ``pydantic.ValidationError``."""
    return _AGENT_MESSAGE.validate_python(data)


def message_seq(data: object) -> int | None:
    """The ``seq`` of a message that may be malformed, when it is a valid sequence number;
    else None. What a refusal may echo back: never a value the site could not store."""
    seq = data.get("seq") if isinstance(data, Mapping) else None
    valid = isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq <= BIGINT_COLUMN_MAX
    return seq if valid else None


def agent_message_errors(exc: pydantic.ValidationError) -> list[FieldError]:
    """Why ``parse_agent_message`` refused a message, by field path within the message
    (``seq``, ``level``, ``result``), without pydantic's union tag in front."""
    errors = []
    for error in exc.errors():
        loc = list(error["loc"])
        if loc and loc[0] in _AGENT_MESSAGE_TYPES:
            loc = loc[1:]
        elif not loc and error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = ["type"]  # the discriminator itself is what is wrong
        errors.append(FieldError(join_path("", loc), readable_message(error)))
    return errors


class Ack(StrictModel):
    """Site → agent: the message ``seq`` is stored (or was already); drop it from the spool."""

    type: Literal["ack"] = "ack"
    seq: SeqNumber


class Rejected(StrictModel):
    """Site → agent: a message was refused and will never be stored; ``seq`` when known."""

    type: Literal["rejected"] = "rejected"
    seq: SeqNumber | None = None
    reason: str


class EpochGrant(StrictModel):
    """Site → agent (``POST /api/v1/agent/runs/<id>/epoch/``): a sequence space of its own
    for an agent that starts without a spool. Each request gets a new, larger one; the agent
    keeps it with its spool and numbers from 0 within it."""

    epoch: Annotated[int, Field(ge=1, le=MAX_EPOCH)]


class Cancel(StrictModel):
    """Site → agent: stop the run now (finish nothing, report, stop the engine, exit)."""

    type: Literal["cancel"] = "cancel"
    reason: str = ""


# Every frame the site sends on the agent's socket.
SiteFrame = Annotated[Ack | Rejected | Cancel, Field(discriminator="type")]
_SITE_FRAME = pydantic.TypeAdapter(SiteFrame)
SITE_FRAME_MODELS: tuple[type[StrictModel], ...] = get_args(get_args(SiteFrame)[0])


def parse_site_frame(data: object) -> Ack | Rejected | Cancel:
    """Validates one site → agent socket frame (parsed JSON), chosen by its ``type``; raises
    ``pydantic.ValidationError`` (an unknown ``type`` included)."""
    return _SITE_FRAME.validate_python(data)
