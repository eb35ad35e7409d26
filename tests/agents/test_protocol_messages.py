"""Agent ↔ site messages: strict, versioned, discriminated by type."""

from __future__ import annotations

import json
import math
import uuid
from pathlib import Path

import pydantic
import pytest

from agents import protocol
from agents.engines.base import FailureKind
from agents.runner.site_link import read_site_frames

RUN = str(uuid.uuid4())
VALID = {
    "hello": {"agent_version": "0.1", "host": {"gpus": [{"name": "H100", "memory_mib": 81559}]}},
    "heartbeat": {},
    "trial_started": {"trial": 0, "serve_config": {"max_num_seqs": 64}, "command": ["vllm"]},
    "cold_start_phase": {"trial": 0, "phase": "weights_loaded", "seconds": 12.5},
    "level_progress": {"trial": 0, "level": {"request_rate": "inf"}, "requests_done": 3},
    "measurement": {
        "trial": 1,
        "level": {"concurrency": 8},
        "result": {"completed": 1, "failed": 0, "duration": 1.0},
    },
    "trial_finished": {"trial": 0, "outcome": "failed", "failure_class": "oom_at_startup"},
    "evaluation": {
        "trial": 0,
        "items": [{"id": "q1", "score": 1.0, "output": "42", "output_sha256": "0" * 64}],
        "summary": {"score": 1.0, "low": 0.2, "high": 1.0, "items": 1, "scored": 1},
    },
    "run_finished": {"outcome": "deadline"},
}


@pytest.mark.parametrize("kind", sorted(VALID))
def test_it_parses_every_message_type(kind):
    message = protocol.parse_agent_message({"type": kind, "run_id": RUN, "seq": 5, **VALID[kind]})
    assert message.type == kind
    assert str(message.run_id) == RUN and message.seq == 5
    assert message.protocol == protocol.PROTOCOL_VERSION
    # What the agent sends is what the site parses back.
    assert protocol.parse_agent_message(message.model_dump(mode="json")) == message


MODELS = {model.model_fields["type"].default: model for model in protocol.AGENT_MESSAGE_MODELS}


@pytest.mark.parametrize("kind", sorted(VALID))
def test_it_gives_each_message_its_own_type_and_still_requires_it_on_the_wire(kind):
    built = MODELS[kind].model_validate({"run_id": RUN, "seq": 5, **VALID[kind]})
    assert built.model_dump(mode="json")["type"] == kind
    schema = MODELS[kind].model_json_schema()
    assert "type" in schema["required"] and "default" not in schema["properties"]["type"]
    assert "type" in _errors({"run_id": RUN, "seq": 5, **VALID[kind]})


def _errors(data) -> dict[str, str]:
    with pytest.raises(pydantic.ValidationError) as caught:
        protocol.parse_agent_message(data)
    return {e.field: e.message for e in protocol.agent_message_errors(caught.value)}


def _message(kind, **changes):
    return {"type": kind, "run_id": RUN, "seq": 1, **VALID[kind], **changes}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_message("heartbeat", seq=-1), "seq"),
        (_message("heartbeat", seq="1"), "seq"),
        (_message("heartbeat", extra=1), "extra"),
        (_message("heartbeat", protocol=protocol.PROTOCOL_VERSION + 1), "protocol"),
        (_message("heartbeat", protocol=1, epoch=2), "epoch"),
        (_message("heartbeat", epoch=-1), "epoch"),
        (_message("heartbeat", epoch=2**31), "epoch"),
        (_message("measurement", result={"completed": 1}), "result"),
        (
            _message("measurement", result={**VALID["measurement"]["result"], "x": math.nan}),
            "result",
        ),
        (_message("measurement", level={}), "level"),
        (_message("measurement", level={"concurrency": 8, "request_rate": 1.0}), "level"),
        (_message("cold_start_phase", phase="Weights Loaded"), "phase"),
        (_message("cold_start_phase", seconds=math.inf), "seconds"),
        (_message("trial_finished", failure_class="gremlins"), "failure_class"),
        (_message("trial_started", serve_config={"x": [math.nan]}), "serve_config"),
        (_message("evaluation", part=1), "part"),
        (_message("evaluation", items=[{"id": "q", "score": 1.5}]), "items"),
        (_message("evaluation", items=[{"id": "q", "output": "x" * 1001}]), "items"),
        (_message("evaluation", summary={"score": 0.5, "items": 2, "scored": 1}), "summary"),
        ({"type": "telepathy", "run_id": RUN, "seq": 1}, "type"),
        ({"run_id": RUN, "seq": 1}, "type"),
    ],
)
def test_it_refuses_malformed_messages_naming_the_field(data, field):
    errors = _errors(data)
    assert any(path == field or path.startswith(field) for path in errors), errors


def test_it_acknowledges_and_rejects_in_its_own_shapes():
    assert protocol.Ack(seq=3).model_dump() == {"type": "ack", "seq": 3}
    assert protocol.Rejected(seq=None, reason="x").model_dump()["type"] == "rejected"
    assert protocol.Cancel().model_dump() == {"type": "cancel", "reason": ""}


def test_the_committed_protocol_schema_matches_the_models():
    committed = Path(__file__).resolve().parents[2] / "docs" / "protocol.schema.json"
    assert json.loads(committed.read_text()) == json.loads(
        json.dumps(protocol.protocol_json_schema())
    ), "regenerate it: python -m agents.protocol > docs/protocol.schema.json"


@pytest.mark.parametrize(
    ("site_root", "socket", "rest"),
    [
        (
            "http://127.0.0.1:8000",
            "ws://127.0.0.1:8000/ws/agent/runs/R/",
            "http://127.0.0.1:8000/api/v1/",
        ),
        (
            "https://bench.example.com/",
            "wss://bench.example.com/ws/agent/runs/R/",
            "https://bench.example.com/api/v1/",
        ),
    ],
)
def test_it_gives_an_agent_its_socket_and_rest_base_from_the_sites_root(site_root, socket, rest):
    assert protocol.agent_site_urls(site_root, run_id="R") == (socket, rest)


@pytest.mark.parametrize(
    ("frame", "model"),
    [
        ({"type": "ack", "seq": 3}, protocol.Ack),
        ({"type": "rejected", "seq": None, "reason": "bad"}, protocol.Rejected),
        ({"type": "cancel", "reason": "asked"}, protocol.Cancel),
    ],
)
def test_it_reads_each_site_frame_as_the_model_its_type_names(frame, model):
    assert protocol.parse_site_frame(frame) == model.model_validate(frame)
    assert model in protocol.SITE_FRAME_MODELS


@pytest.mark.parametrize(
    "frame",
    [{"type": "hello"}, {"seq": 3}, {"type": "ack", "seq": -1}, {"type": "ack", "x": 1}, []],
)
def test_it_refuses_a_site_frame_it_does_not_know(frame):
    with pytest.raises(pydantic.ValidationError):
        protocol.parse_site_frame(frame)


def test_the_agent_names_the_frames_it_expects_when_one_is_unknown():
    with pytest.raises(ValueError, match="'ack', 'rejected', 'cancel'"):
        read_site_frames('{"type": "hello"}')
    with pytest.raises(ValueError, match="not JSON"):
        read_site_frames("{")
    # An array answers an array frame; one bad element refuses the whole frame.
    with pytest.raises(ValueError, match="'ack', 'rejected', 'cancel'"):
        read_site_frames('[{"type": "ack", "seq": 1}, {"type": "hello"}]')


def test_the_agent_reads_one_reply_or_an_array_of_them_in_order():
    (one,) = read_site_frames('{"type": "ack", "seq": 4}')
    assert one == protocol.Ack(seq=4)
    replies = read_site_frames(
        '[{"type": "ack", "seq": 5}, {"type": "rejected", "seq": 6, "reason": "bad"}]'
    )
    assert replies == [protocol.Ack(seq=5), protocol.Rejected(seq=6, reason="bad")]
    assert read_site_frames("[]") == []


def test_it_names_every_engine_failure_by_a_trial_failure_class():
    # One vocabulary: the runner sends an engine's failure kind as the trial's class.
    assert {kind.value for kind in FailureKind} <= set(protocol.TRIAL_FAILURE_CLASSES)
