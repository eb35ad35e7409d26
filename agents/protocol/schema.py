"""The protocol's JSON Schema, as committed in docs/protocol.schema.json."""

from __future__ import annotations

import pydantic

from agents.protocol.job_spec import JobSpec
from agents.protocol.messages import (
    PROTOCOL_VERSION,
    SITE_FRAME_MODELS,
    AgentMessage,
    EpochGrant,
)
from agents.protocol.serve_flag_table import SERVE_FLAGS_SCHEMA_VERSION
from agents.protocol.transport import BATCH_SUBPROTOCOL, BatchAnswer, BatchRequest


def protocol_json_schema() -> dict:
    """JSON Schema of everything on the wire between agent and site (checked in CI against
    the committed copy in docs/protocol.schema.json)."""
    messages = pydantic.TypeAdapter(AgentMessage).json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Benchsite agent protocol",
        "x-protocol-version": PROTOCOL_VERSION,
        "x-serve-flags-schema-version": SERVE_FLAGS_SCHEMA_VERSION,
        # The socket's subprotocol for array frames (agents.protocol.transport).
        "x-batch-subprotocol": BATCH_SUBPROTOCOL,
        "agent_to_site": messages,
        "site_to_agent": {
            model.__name__: model.model_json_schema() for model in (*SITE_FRAME_MODELS, EpochGrant)
        },
        "rest_batch": {
            "request": BatchRequest.model_json_schema(),
            "answer": BatchAnswer.model_json_schema(),
        },
        "job": JobSpec.model_json_schema(),
    }
