"""The OpenAPI schema generates without a warning and validates against the OpenAPI spec."""

from __future__ import annotations

import io
import json

import pydantic
import pytest
from django.core.management import call_command
from django.test import Client

from agents.protocol import (
    MAX_BATCH_MESSAGES,
    MAX_SLO_MS,
    SERVE_FLAGS,
    AgentMessage,
    JobSpec,
    Slos,
    Workload,
    serve_flags_json_schema,
    validate_serve_grid,
)
from runs.inputs.json_schemas import (
    EXAMPLE_SERVE_GRID,
    EXAMPLE_SLOS,
    EXAMPLE_WORKLOAD,
    openapi_schema,
)
from runs.models import Experiment
from runs.run_as_started import PER_ATTEMPT


def test_it_generates_a_valid_schema_without_warnings(db):
    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = out.getvalue()
    assert "/api/v1/orgs/{org}/experiments/" in schema
    assert "bearerToken" in schema and "runToken" in schema


# ------------------------------------------------------------------------------------------
# The experiment's JSON fields carry the protocol's structure (issue 14, item 10)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served_schema(django_db_blocker) -> dict:
    """The schema as /api/v1/schema/ serves it."""
    with django_db_blocker.unblock():
        response = Client().get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    return json.loads(response.content)


def _inlined(node, components: dict):
    """``node`` with every ``$ref`` replaced by its component and spectacular's
    ``allOf: [one]`` wrappers (around an extracted enum) folded into their parent."""
    if isinstance(node, list):
        return [_inlined(item, components) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _inlined(components[node["$ref"].rsplit("/", 1)[1]], components)
    node = {key: _inlined(value, components) for key, value in node.items()}
    if len(node.get("allOf", [])) == 1:
        node = node.pop("allOf")[0] | node
    if "discriminator" in node:
        node["discriminator"] = {"propertyName": node["discriminator"]["propertyName"]}
    return node


def _expected(model_schema: dict) -> dict:
    schema, components = openapi_schema(model_schema)
    return _inlined(schema, components)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("serve_grid", lambda: serve_flags_json_schema(max_trials=64)),
        ("workload", Workload.model_json_schema),
        ("slos", Slos.model_json_schema),
    ],
)
@pytest.mark.parametrize("component", ["Experiment", "ExperimentRequest"])
def test_it_shows_an_experiments_json_fields_as_the_protocol_defines_them(
    served_schema, settings, component, field, expected
):
    components = served_schema["components"]["schemas"]
    served = _inlined(components[component]["properties"][field], components)
    wanted = expected()
    wanted.pop("x-flags", None)  # the flag table is /api/v1/serve-flags/'s, not the field's
    for key in ("example", "default", "readOnly", "description"):
        served.pop(key, None)
        wanted.pop(key, None)
    assert served == _expected(wanted)


def test_it_shows_the_structure_itself_not_an_empty_object(served_schema):
    # The facts an operator had to read seed_demo.py for, read from the served schema.
    components = served_schema["components"]["schemas"]
    request = components["ExperimentRequest"]["properties"]
    assert set(request["serve_grid"]["properties"]) == set(SERVE_FLAGS)
    assert set(request["workload"]["properties"]) == set(Workload.model_fields)
    assert request["workload"]["required"] == ["dataset"]
    assert set(request["slos"]["properties"]) == set(Slos.model_fields)
    assert request["slos"]["properties"]["ttft_ms"]["maximum"] == MAX_SLO_MS
    kinds = request["workload"]["properties"]["dataset"]["discriminator"]["mapping"]
    assert set(kinds) == {
        "random",
        "sharegpt",
        "prefix",
        "mooncake",
        "burstgpt",
        "azure",
        "chat_sessions",
        "agentic",
        "agentic_trace",
    }


@pytest.mark.parametrize("field", ["serve_grid", "workload", "slos"])
def test_it_gives_an_example_the_protocol_accepts(served_schema, field):
    example = served_schema["components"]["schemas"]["ExperimentRequest"]["properties"][field][
        "example"
    ]
    assert (
        example
        == {
            "serve_grid": EXAMPLE_SERVE_GRID,
            "workload": EXAMPLE_WORKLOAD,
            "slos": EXAMPLE_SLOS,
        }[field]
    )
    if field == "serve_grid":
        assert validate_serve_grid(example, gpu_count=1) == example
    else:
        model = {"workload": Workload, "slos": Slos}[field]
        assert model.model_validate(example)  # raises when the example is not valid


def test_the_demo_seeds_the_schemas_examples(db):
    call_command("seed_demo", stdout=io.StringIO())
    experiment = Experiment.objects.get(name="Llama 8B on H100: batching limits")
    assert experiment.serve_grid == EXAMPLE_SERVE_GRID
    assert Workload.model_validate(experiment.workload) == Workload.model_validate(EXAMPLE_WORKLOAD)
    assert experiment.slos == EXAMPLE_SLOS


def test_it_shows_the_agents_job_and_messages_as_the_protocol_defines_them(served_schema):
    components = served_schema["components"]["schemas"]
    paths = served_schema["paths"]
    job = paths["/api/v1/agent/runs/{run_id}/job/"]["get"]["responses"]["200"]
    served = _inlined(job["content"]["application/json"]["schema"], components)
    assert served == _expected(JobSpec.model_json_schema())
    batch = paths["/api/v1/agent/runs/{run_id}/messages/"]["post"]["requestBody"]
    body = _inlined(batch["content"]["application/json"]["schema"], components)
    messages = body["properties"]["messages"]
    assert messages["maxItems"] == MAX_BATCH_MESSAGES
    assert messages["items"] == _expected(pydantic.TypeAdapter(AgentMessage).json_schema())


def test_it_shows_a_runs_frozen_job_as_the_agents_job_less_each_attempts_parts(served_schema):
    components = served_schema["components"]["schemas"]
    served = _inlined(components["RunDetail"]["properties"]["job_spec"], components)
    assert served.pop("readOnly") is True
    job = JobSpec.model_json_schema()
    for part in PER_ATTEMPT:
        job["properties"].pop(part)
    job["required"] = [name for name in job["required"] if name not in PER_ATTEMPT]
    assert served == _expected(job)
    assert {"run_id", "deadline"} <= set(JobSpec.model_json_schema()["required"])
