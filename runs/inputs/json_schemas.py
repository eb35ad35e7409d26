"""What the API schema shows for its JSON fields, generated from ``agents.protocol``.

Guarantees:

- The serve grid's shape is ``serve_flags_json_schema`` and the workload's, the SLOs' and
  the agent's wire shapes are the ``model_json_schema`` of the very pydantic models the site
  validates with: one truth, no hand-written copy. ``openapi_schema`` only translates JSON
  Schema 2020-12 into the OpenAPI 3.0 dialect the API schema is written in (``nullable``
  for a ``null`` alternative, ``enum`` for ``const``, boolean exclusive bounds, components
  for ``$defs``); it adds and drops no rule. A run's frozen job is ``JobSpec``'s schema less
  the per-attempt fields (``runs.run_as_started.PER_ATTEMPT``), as it is stored.
- Each experiment example is a real, valid value: the demo seeds an experiment with it
  (``seed_demo``), and the tests validate it with the protocol's models.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, get_args

import pydantic
from django.conf import settings
from rest_framework import serializers

from agents import protocol
from runs.experiment_evaluation import ExperimentEvaluation
from runs.experiment_search import ExperimentSearch
from runs.run_as_started import PER_ATTEMPT

COMPONENTS_REF = "#/components/schemas/"

# The demo's first experiment (seed_demo) and the examples of the API schema.
EXAMPLE_SERVE_GRID = {"max_num_seqs": [64, 128, 256], "max_num_batched_tokens": [2048, 8192]}
EXAMPLE_WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 1024, "output_len": 256},
    "concurrency": [1, 8, 64, 192],
    "requests_per_level": 200,
    "warmup_requests": 16,
}
EXAMPLE_SLOS = {"ttft_ms": 500, "tpot_ms": 50}
EXAMPLE_SEARCH = {"strategy": "prune", "spend_limit_gpu_minutes": 120, "max_trials": 12}
# A model's config.json as published (meta-llama/Llama-3.1-8B-Instruct's architecture keys).
EXAMPLE_HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def _bounds_to_openapi30(schema: dict) -> None:
    # 2020-12 gives exclusive bounds as numbers; OpenAPI 3.0 as flags on minimum/maximum.
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        bound = schema.get(exclusive)
        if isinstance(bound, int | float) and not isinstance(bound, bool):
            schema[inclusive] = bound
            schema[exclusive] = True


def _to_openapi30(node: Any) -> Any:
    if isinstance(node, list):
        return [_to_openapi30(item) for item in node]
    if not isinstance(node, Mapping):
        return node
    schema = {
        key: (value if key.startswith("x-") else _to_openapi30(value))
        for key, value in node.items()
        if key not in ("$schema", "$defs")
    }
    if isinstance(schema.get("$ref"), str):
        schema["$ref"] = schema["$ref"].replace("#/$defs/", COMPONENTS_REF)
    mapping = schema.get("discriminator", {}).get("mapping")
    if isinstance(mapping, dict):
        schema["discriminator"]["mapping"] = {
            tag: ref.replace("#/$defs/", COMPONENTS_REF) for tag, ref in mapping.items()
        }
    if "const" in schema:
        schema["enum"] = [schema.pop("const")]
    if "examples" in schema:
        examples = schema.pop("examples")
        if examples:
            schema["example"] = examples[0]
    _bounds_to_openapi30(schema)
    types = schema.get("type")
    if isinstance(types, list):
        rest = [kind for kind in types if kind != "null"]
        if len(rest) < len(types):
            schema["nullable"] = True
        if len(rest) == 1:
            schema["type"] = rest[0]
        else:
            del schema["type"]
            schema["anyOf"] = [{"type": kind} for kind in rest]
    for union in ("anyOf", "oneOf"):
        members = schema.get(union)
        if not isinstance(members, list):
            continue
        rest = [member for member in members if member != {"type": "null"}]
        if len(rest) == len(members):
            continue
        schema["nullable"] = True
        if len(rest) == 1 and "$ref" not in rest[0]:
            del schema[union]
            schema = rest[0] | schema  # the member's rules, with the field's title, default…
        elif len(rest) == 1:
            del schema[union]
            schema["allOf"] = rest  # a $ref takes no siblings in 3.0
        else:
            schema[union] = rest
    return schema


def openapi_schema(json_schema: Mapping) -> tuple[dict, dict[str, dict]]:
    """A JSON Schema (2020-12) as an OpenAPI 3.0 schema object, and the components its
    ``$defs`` become (referred to as ``#/components/schemas/<name>``)."""
    components = {
        name: _to_openapi30(definition) for name, definition in json_schema.get("$defs", {}).items()
    }
    return _to_openapi30(json_schema), components


def model_openapi_schema(model: type[pydantic.BaseModel] | pydantic.TypeAdapter) -> tuple:
    """``openapi_schema`` of a pydantic model's (or type adapter's) own JSON Schema."""
    if isinstance(model, pydantic.TypeAdapter):
        return openapi_schema(model.json_schema())
    return openapi_schema(model.model_json_schema())


def _json_field(schema_and_components: tuple[dict, dict], example: object) -> dict:
    schema, components = schema_and_components
    return {
        "json_schema": schema,
        "components": components,
        "example": copy.deepcopy(example),
    }


def _serve_grid_json_schema() -> dict:
    grid = protocol.serve_flags_json_schema(max_trials=settings.BENCHSITE_MAX_GRID_TRIALS)
    # The flag table is published at /api/v1/serve-flags/; the grid's rules are enough here.
    grid.pop("x-flags", None)
    return grid


# The keyword arguments of the experiment serializer's JSON fields (StrictJSONField).
SERVE_GRID_FIELD = _json_field(openapi_schema(_serve_grid_json_schema()), EXAMPLE_SERVE_GRID)
WORKLOAD_FIELD = _json_field(model_openapi_schema(protocol.Workload), EXAMPLE_WORKLOAD)
SLOS_FIELD = _json_field(model_openapi_schema(protocol.Slos), EXAMPLE_SLOS)
SEARCH_FIELD = _json_field(model_openapi_schema(ExperimentSearch), EXAMPLE_SEARCH)
EVALUATION_FIELD = _json_field(
    model_openapi_schema(ExperimentEvaluation),
    {"pack": "arithmetic", "quality_floor": {"max_points_below_best": 2}},
)
LORA_ADAPTERS_FIELD = _json_field(
    model_openapi_schema(pydantic.TypeAdapter(list[protocol.LoraAdapter])),
    [{"name": "sql", "hf_repo": "org/llama-3.1-8b-sql-lora", "revision": "main"}],
)
# A registered model's facts beyond its columns: what its jobs carry (ModelSource).
MODEL_ARCHITECTURE_FIELD = _json_field(model_openapi_schema(protocol.ModelArchitecture), None)
# Any JSON object: agents.hardware says which of its keys it reads (runs.model_config).
HF_CONFIG_FIELD = _json_field(
    ({"type": "object", "additionalProperties": True}, {}), EXAMPLE_HF_CONFIG
)


class ProtocolBody(serializers.Serializer):
    """A request or response body that is one protocol model's JSON (for the API schema
    only: the view validates with the model itself)."""

    json_schema: dict = {}
    json_components: dict = {}


def protocol_body(name: str, model: type[pydantic.BaseModel]) -> type[ProtocolBody]:
    """A ``ProtocolBody`` whose schema is ``model``'s, shown as the component ``name``."""
    schema, components = model_openapi_schema(model)
    return type(
        name,
        (ProtocolBody,),
        {"json_schema": schema, "json_components": components, "__module__": __name__},
    )


def _agent_messages_schema() -> tuple[dict, dict]:
    message, components = model_openapi_schema(pydantic.TypeAdapter(protocol.AgentMessage))
    batch = {"type": "array", "items": message, "maxItems": protocol.MAX_BATCH_MESSAGES}
    return batch, components


def _frozen_job_schema() -> tuple[dict, dict]:
    job, components = model_openapi_schema(protocol.JobSpec)
    job["properties"] = {k: v for k, v in job["properties"].items() if k not in PER_ATTEMPT}
    job["required"] = [name for name in job["required"] if name not in PER_ATTEMPT]
    return job, components


# The agent's job (GET agent/runs/<id>/job/) and the messages of a REST batch.
JobSpecBody = protocol_body("JobSpec", protocol.JobSpec)
AGENT_MESSAGES_FIELD = _json_field(_agent_messages_schema(), None)
# A run's frozen job (Run.job_spec): the agent's job less each attempt's parts.
FROZEN_JOB_FIELD = _json_field(_frozen_job_schema(), None)


def agent_protocol_choices() -> list[tuple[int, int]]:
    """The protocol versions an agent message may carry, as choices: the name of their enum
    in the API schema (SPECTACULAR_SETTINGS' ENUM_NAME_OVERRIDES), shared by every message."""
    versions = get_args(protocol.AgentMessageBase.model_fields["protocol"].annotation)
    return [(version, version) for version in versions]


def slo_verdict_choices() -> list[tuple[str, str]]:
    """What an SLO check or a capacity bracket's end may be judged, as choices: one enum in
    the API schema (``agents.protocol.slo_verdicts``)."""
    return [(verdict, verdict) for verdict in protocol.VERDICTS]


def slo_percentile_choices() -> list[tuple[int, int]]:
    """The percentiles an SLO may be judged at, as choices: one enum in the API schema for
    the four ``*_percentile`` fields of ``protocol.Slos``."""
    return [(percentile, percentile) for percentile in protocol.SLO_PERCENTILES]
