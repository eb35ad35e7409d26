"""The one schema shared by the Benchsite site and its agent: serve flags, workloads, SLOs,
the messages both ways and the job.

Guarantees:

- Pure Python: stdlib and pydantic only. The site imports this package; the agent runs it in
  a GPU pod where Django does not exist.
- Every public name is importable from ``agents.protocol`` itself; the modules only say which
  job each name belongs to:

  - ``errors``: ``FieldError``, ``ServeGridError`` and how a refusal quotes a value;
  - ``pydantic_errors``: pydantic's errors as ``FieldError``s with the same field paths;
  - ``strict``: ``StrictModel``, the base of every protocol model;
  - ``versions``: vLLM version strings as comparable keys;
  - ``serve_flag_table``: the serve-flag table (``SERVE_FLAGS``, ``FlagSpec``), as data;
  - ``serve_flags``: grid and configuration validation, grid expansion;
  - ``serve_flag_rendering``: ``serve_args`` and the serve grid's JSON Schema;
  - ``serve_command``: the words after ``vllm serve``, for the benchmark and the recipe;
  - ``workload``: datasets, ``Workload``, ``Slos`` and a workload's levels;
  - ``json_bounds``: the nesting depth of JSON documents, checked before decoding;
  - ``fields``: the bounded number and JSON field types (each fits its site column);
  - ``level_result``: ``LevelResult``, what one load level measured;
  - ``messages``: agent → site messages and the site's answers;
  - ``transport``: routes, socket close codes and the REST batch, for both sides;
  - ``job``: ``JobSpec`` and its parts;
  - ``schema``: the JSON Schema of all of it (``python -m agents.protocol``).
- Validation is strict and complete: a boolean is not a number, ``"8"`` is not ``8``, and
  every problem is reported at once as a ``FieldError`` whose ``field`` is a path relative to
  the validated object (``max_num_seqs[1]``, ``dataset.input_len``, ``concurrency[2]``).
"""

from agents.protocol.capacity import CAPACITY_STOP_REASONS, CapacityResult
from agents.protocol.errors import FieldError, ServeGridError
from agents.protocol.fields import (
    BIGINT_COLUMN_MAX,
    INTEGER_COLUMN_MAX,
    MAX_EPOCH,
    Count,
    EpochNumber,
    FiniteFloat,
    FiniteJson,
    RunId,
    SeqNumber,
    TrialIndex,
)
from agents.protocol.job import (
    MAX_JOB_TRIALS,
    EngineSpec,
    JobSpec,
    ModelSource,
    ReportTo,
    TrialSpec,
)
from agents.protocol.json_bounds import (
    MAX_JSON_DEPTH,
    JsonTooDeep,
    json_depth_exceeds,
    json_loads_bounded,
)
from agents.protocol.level_result import (
    LATENCY_METRICS,
    LATENCY_STATISTICS,
    LEVEL_RESULT_KEY,
    SLO_CHECK_KEY,
    ErrorCount,
    FieldNames,
    Interval,
    LevelFigures,
    LevelResult,
    OutputLenMismatch,
    SimulatedTime,
    SloCheck,
    SteadyWindow,
    latency_field,
    percentile_statistic,
)
from agents.protocol.messages import (
    MAX_LOG_TAIL_CHARS,
    PROTOCOL_VERSION,
    SITE_FRAME_MODELS,
    TRIAL_FAILURE_CLASSES,
    WEIGHTS_PHASE,
    Ack,
    AgentMessage,
    AgentMessageBase,
    Cancel,
    ColdStartPhase,
    EngineRestarted,
    EpochGrant,
    GpuInfo,
    Heartbeat,
    Hello,
    HostFacts,
    Level,
    LevelProgress,
    MeasurementReport,
    Rejected,
    RunFinished,
    SiteFrame,
    TrialFinished,
    TrialStarted,
    agent_message_errors,
    message_seq,
    parse_agent_message,
    parse_site_frame,
)
from agents.protocol.pydantic_errors import pydantic_field_errors
from agents.protocol.schema import protocol_json_schema
from agents.protocol.serve_command import serve_command_args
from agents.protocol.serve_flag_rendering import serve_args, serve_flags_json_schema
from agents.protocol.serve_flag_table import (
    SERVE_FLAGS,
    SERVE_FLAGS_SCHEMA_VERSION,
    FlagKind,
    FlagSpec,
)
from agents.protocol.serve_flags import (
    MAX_GRID_TRIALS,
    expand_serve_grid,
    trial_configs,
    validate_serve_grid,
)
from agents.protocol.strict import StrictModel
from agents.protocol.transport import (
    AGENT_DATASET_ROUTE,
    AGENT_EPOCH_ROUTE,
    AGENT_JOB_ROUTE,
    AGENT_MESSAGES_ROUTE,
    AGENT_SOCKET_ROUTE,
    API_BASE_ROUTE,
    MAX_BATCH_BYTES,
    MAX_BATCH_MESSAGES,
    BatchAnswer,
    BatchRefusal,
    BatchRequest,
    CloseCode,
    agent_route,
    agent_site_urls,
    batch_request_body,
)
from agents.protocol.versions import VersionKey, parse_vllm_version
from agents.protocol.workload import (
    BURSTINESS_RANGE,
    MAX_CONCURRENCY,
    MAX_INPUT_LEN,
    MAX_LOAD_LEVELS,
    MAX_OUTPUT_LEN,
    MAX_SEED,
    MAX_SLO_MS,
    REQUEST_RATE_RANGE,
    SLO_PERCENTILES,
    CapacitySearch,
    Dataset,
    InputLen,
    OutputLen,
    PositiveFloat,
    PrefixDataset,
    RandomDataset,
    RequestRate,
    RequestRateNumber,
    ShareGptDataset,
    SloMs,
    Slos,
    Workload,
    capacity_probe_levels,
    level_requests,
    parse_slos,
    steady_window_requests,
    workload_levels,
)

__all__ = [
    "AGENT_DATASET_ROUTE",
    "AGENT_EPOCH_ROUTE",
    "AGENT_JOB_ROUTE",
    "AGENT_MESSAGES_ROUTE",
    "AGENT_SOCKET_ROUTE",
    "API_BASE_ROUTE",
    "BIGINT_COLUMN_MAX",
    "BURSTINESS_RANGE",
    "CAPACITY_STOP_REASONS",
    "INTEGER_COLUMN_MAX",
    "LATENCY_METRICS",
    "LATENCY_STATISTICS",
    "LEVEL_RESULT_KEY",
    "MAX_BATCH_BYTES",
    "MAX_BATCH_MESSAGES",
    "MAX_CONCURRENCY",
    "MAX_EPOCH",
    "MAX_GRID_TRIALS",
    "MAX_INPUT_LEN",
    "MAX_JOB_TRIALS",
    "MAX_JSON_DEPTH",
    "MAX_LOAD_LEVELS",
    "MAX_LOG_TAIL_CHARS",
    "MAX_OUTPUT_LEN",
    "MAX_SEED",
    "MAX_SLO_MS",
    "PROTOCOL_VERSION",
    "REQUEST_RATE_RANGE",
    "SERVE_FLAGS",
    "SERVE_FLAGS_SCHEMA_VERSION",
    "SITE_FRAME_MODELS",
    "SLO_CHECK_KEY",
    "SLO_PERCENTILES",
    "TRIAL_FAILURE_CLASSES",
    "WEIGHTS_PHASE",
    "Ack",
    "AgentMessage",
    "AgentMessageBase",
    "BatchAnswer",
    "BatchRefusal",
    "BatchRequest",
    "Cancel",
    "CapacityResult",
    "CapacitySearch",
    "CloseCode",
    "ColdStartPhase",
    "Count",
    "Dataset",
    "EngineRestarted",
    "EngineSpec",
    "EpochGrant",
    "EpochNumber",
    "ErrorCount",
    "FieldError",
    "FieldNames",
    "FiniteFloat",
    "FiniteJson",
    "FlagKind",
    "FlagSpec",
    "GpuInfo",
    "Heartbeat",
    "Hello",
    "HostFacts",
    "InputLen",
    "Interval",
    "JobSpec",
    "JsonTooDeep",
    "Level",
    "LevelFigures",
    "LevelProgress",
    "LevelResult",
    "MeasurementReport",
    "ModelSource",
    "OutputLen",
    "OutputLenMismatch",
    "PositiveFloat",
    "PrefixDataset",
    "RandomDataset",
    "Rejected",
    "ReportTo",
    "RequestRate",
    "RequestRateNumber",
    "RunFinished",
    "RunId",
    "SeqNumber",
    "ServeGridError",
    "ShareGptDataset",
    "SimulatedTime",
    "SiteFrame",
    "SloCheck",
    "SloMs",
    "Slos",
    "SteadyWindow",
    "StrictModel",
    "TrialFinished",
    "TrialIndex",
    "TrialSpec",
    "TrialStarted",
    "VersionKey",
    "Workload",
    "agent_message_errors",
    "agent_route",
    "agent_site_urls",
    "batch_request_body",
    "capacity_probe_levels",
    "expand_serve_grid",
    "json_depth_exceeds",
    "json_loads_bounded",
    "latency_field",
    "level_requests",
    "message_seq",
    "parse_agent_message",
    "parse_site_frame",
    "parse_slos",
    "parse_vllm_version",
    "percentile_statistic",
    "protocol_json_schema",
    "pydantic_field_errors",
    "serve_args",
    "serve_command_args",
    "serve_flags_json_schema",
    "steady_window_requests",
    "trial_configs",
    "validate_serve_grid",
    "workload_levels",
]
