"""Workloads beyond random prompts: request traces as published (``traces``)."""

from agents.workloads.traces import (
    BURSTGPT_LOG_TYPES,
    Trace,
    TraceError,
    TraceRequest,
    parse_trace,
)

__all__ = [
    "BURSTGPT_LOG_TYPES",
    "Trace",
    "TraceError",
    "TraceRequest",
    "parse_trace",
]
