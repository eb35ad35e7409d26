"""From the site's ``Workload`` (``agents.protocol``) to a load-generator configuration.

Guarantees: the levels, dataset, endpoint, burstiness, requests per level, warm-up, steady
window, ramp and capacity search of the workload are carried over unchanged (its levels are
steady, except a trace's open-loop levels, which replay it whole); a ShareGPT or trace
workload needs the local path its uploaded file was saved to. A trace is read once per
file and options (``agents.workloads.parse_trace``, then its window); a file that cannot be
used raises ``DatasetError`` naming the line and field.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from agents.loadgen.agentic_prompts import AgenticPrompts
from agents.loadgen.config import BenchConfig, PromptSource
from agents.loadgen.prompts import (
    DatasetError,
    PrefixPrompts,
    RandomPrompts,
    ShareGptPrompts,
    TracePrompts,
)
from agents.loadgen.session_prompts import SessionPrompts
from agents.protocol import (
    MOONCAKE_BLOCK_SIZE,
    AgenticDataset,
    AgenticTraceDataset,
    ChatSessionsDataset,
    PrefixDataset,
    RandomDataset,
    ShareGptDataset,
    Slos,
    TraceDataset,
    Workload,
    workload_levels,
)
from agents.workloads import TraceError, parse_trace
from agents.workloads.agentic import SessionShape, parse_agentic


def prompt_source(workload: Workload, *, dataset_path: Path | None = None) -> PromptSource:
    """The prompt source of the workload's dataset (an uploaded one read from
    ``dataset_path``)."""
    dataset = workload.dataset
    if isinstance(dataset, RandomDataset):
        return RandomPrompts(dataset.input_len, dataset.output_len, dataset.range_ratio)
    if isinstance(dataset, PrefixDataset):
        return PrefixPrompts(
            dataset.shared_len, dataset.suffix_len, dataset.output_len, dataset.num_prefixes
        )
    if isinstance(dataset, ChatSessionsDataset):
        return SessionPrompts(
            dataset.min_turns,
            dataset.max_turns,
            dataset.system_len,
            dataset.user_len,
            dataset.output_len,
            dataset.range_ratio,
            dataset.think_seconds,
        )
    if isinstance(dataset, AgenticDataset):
        shape = dataset.model_dump(exclude={"kind"})
        return AgenticPrompts(shape=SessionShape(**shape))
    if isinstance(dataset, ShareGptDataset | TraceDataset | AgenticTraceDataset) and (
        dataset_path is None
    ):
        raise ValueError(f"{dataset.kind} dataset {dataset.dataset_id} needs its local file path")
    if isinstance(dataset, ShareGptDataset):
        return ShareGptPrompts(Path(dataset_path), dataset.output_len)
    if isinstance(dataset, AgenticTraceDataset):
        return agentic_prompts(Path(dataset_path), block_size=dataset.block_size)
    if isinstance(dataset, TraceDataset):
        return trace_prompts(
            Path(dataset_path),
            dataset.kind,
            block_size=dataset.block_size,
            model=dataset.model,
            log_type=dataset.log_type,
            start_seconds=dataset.start_seconds,
            duration_seconds=dataset.duration_seconds,
        )
    raise TypeError(f"unknown dataset {type(dataset).__name__}")


@lru_cache(maxsize=4)
def agentic_prompts(path: Path, *, block_size: int = MOONCAKE_BLOCK_SIZE) -> AgenticPrompts:
    """The sessions of the session JSONL file at ``path`` (``agents.workloads.agentic``);
    ``DatasetError`` naming the line and field when it cannot be used. Cached."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"cannot read the session file {str(path)!r}: {error}") from None
    try:
        return AgenticPrompts(trace=parse_agentic(data, block_size=block_size))
    except TraceError as error:
        raise DatasetError(f"session file {path.name}: {error}") from None


@lru_cache(maxsize=4)
def trace_prompts(
    path: Path,
    trace_format: str,
    *,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    model: str | None = None,
    log_type: str | None = None,
    start_seconds: float = 0.0,
    duration_seconds: float | None = None,
) -> TracePrompts:
    """The trace at ``path`` (``agents.workloads.parse_trace`` with these options), cut to
    its window, as prompts; ``DatasetError`` naming the line and field when it cannot be
    used. Cached: a search builds a configuration per prediction, each reading the trace."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"cannot read the {trace_format} trace {str(path)!r}: {error}") from None
    try:
        trace = parse_trace(
            data, trace_format, block_size=block_size, model=model, log_type=log_type
        ).window(start_seconds, duration_seconds)
    except TraceError as error:
        raise DatasetError(f"{trace_format} trace {path.name}: {error}") from None
    return TracePrompts(trace)


def config_from_workload(
    workload: Workload,
    *,
    base_url: str,
    model: str,
    slos: Slos | None = None,
    dataset_path: Path | None = None,
    **options,
) -> BenchConfig:
    """A ``BenchConfig`` running ``workload``; ``options`` are other ``BenchConfig`` fields
    (``api_key``, ``tokenizer``, ``metrics_url``, ``seed``, …); a timed level is the
    workload's ``level_seconds``."""
    return BenchConfig(
        base_url=base_url,
        model=model,
        source=prompt_source(workload, dataset_path=dataset_path),
        levels=tuple(workload_levels(workload)),
        endpoint=workload.endpoint,
        burstiness=workload.burstiness,
        num_prompts=workload.requests_per_level,
        warmup=workload.warmup_requests,
        steady_multiple=workload.steady_multiple,
        ramp_up_seconds=workload.ramp_up_seconds,
        capacity=workload.capacity,
        repeats=workload.repeats,
        max_extensions=workload.max_extensions,
        duration=workload.level_seconds,
        slos=slos,
        **options,
    )
