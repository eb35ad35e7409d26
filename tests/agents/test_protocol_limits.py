"""The protocol's limits: how deep a JSON document may nest, and how large each number an
agent sends may be (each must fit the site column it is stored in)."""

from __future__ import annotations

import json
import uuid

import pydantic
import pytest

from agents import protocol

RUN = str(uuid.uuid4())
DEEPEST = protocol.MAX_JSON_DEPTH


def _nested(depth: int, opening: str = "[", closing: str = "]") -> str:
    return opening * depth + closing * depth


@pytest.mark.parametrize(
    "text",
    [
        _nested(DEEPEST),
        '{"a": ' * (DEEPEST - 1) + "{}" + "}" * (DEEPEST - 1),
        "[" + ",".join(["[]"] * 10_000) + "]",  # wide, not deep
        json.dumps({"messages": [{"result": {"series": [[1, 2]] * 100}}] * 100}),
        '["' + "[" * 10_000 + '"]',  # brackets inside a string are text
        '["\\"' + "{" * 10_000 + '"]',  # ... after an escaped quote too
    ],
    ids=["at the limit", "objects at the limit", "wide", "an agent batch", "text", "escaped"],
)
def test_it_lets_documents_within_the_depth_limit_through(text):
    assert not protocol.json_depth_exceeds(text)
    assert not protocol.json_depth_exceeds(text.encode())
    assert protocol.json_loads_bounded(text) == json.loads(text)


@pytest.mark.parametrize(
    "text",
    [
        _nested(DEEPEST + 1),
        _nested(1_000_000, "{", "}"),  # far beyond what recursion could survive
        "[" * 1_000_000,  # never closed
        '["\\\\"' + "[" * 100 + "]" * 100 + "]",  # an escaped backslash ends the string
    ],
    ids=["one too deep", "a million objects", "unclosed", "after a backslash"],
)
def test_it_refuses_documents_nested_too_deep_without_recursing(text):
    assert protocol.json_depth_exceeds(text)
    assert protocol.json_depth_exceeds(text.encode())
    with pytest.raises(ValueError, match=f"deeper than {DEEPEST}"):
        protocol.json_loads_bounded(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, -0.0, 1e-05, 1e400, "\\u00e9", true, null], "a": {"dup": 1}}',
        "[NaN, Infinity, -Infinity]",  # the standard library reads these; orjson does not
        '["\\ud800"]',  # a lone surrogate, the same
        "[123456789012345678901234567890]",  # beyond 64 bits
        "  {}  ",
    ],
    ids=["plain", "non-finite", "lone surrogate", "big integer", "spaces"],
)
def test_it_decodes_exactly_what_the_standard_library_decodes(text):
    decoded = protocol.json_loads_bounded(text)
    assert repr(decoded) == repr(json.loads(text))
    assert repr(protocol.json_loads_bounded(text.encode("utf-16"))) == repr(decoded)


def test_it_refuses_what_is_not_json_as_the_standard_library_does():
    for text in ("{not json", "[1,]", ""):
        with pytest.raises(ValueError) as refused:
            protocol.json_loads_bounded(text)
        assert not isinstance(refused.value, protocol.JsonTooDeep)


def test_it_scans_an_unclosed_string_once():
    # Every quote of this starts a string that never ends; a scan that retried from each
    # quote would take minutes (quadratic), a linear one takes milliseconds.
    text = '"\\' * 200_000 + _nested(DEEPEST + 1)
    assert not protocol.json_depth_exceeds(text)  # all of it is one (broken) string
    with pytest.raises(ValueError):
        json.loads(text)


def _message(kind: str, **fields) -> dict:
    return {"type": kind, "run_id": RUN, "seq": 1, **fields}


def _refused_fields(data: dict) -> set[str]:
    with pytest.raises(pydantic.ValidationError) as caught:
        protocol.parse_agent_message(data)
    return {error.field for error in protocol.agent_message_errors(caught.value)}


RESULT = {"completed": 1, "failed": 0, "duration": 1.0}
LEVEL = {"concurrency": 8}


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (_message("heartbeat", seq=protocol.BIGINT_COLUMN_MAX + 1), "seq"),
        (_message("heartbeat", seq=2**64), "seq"),
        (_message("heartbeat", trial=2**31), "trial"),
        (
            _message("measurement", trial=0, level={"concurrency": 2**31}, result=RESULT),
            "level.concurrency",
        ),
        (
            _message("level_progress", trial=0, level=LEVEL, requests_done=2**31),
            "requests_done",
        ),
        (
            _message("level_progress", trial=0, level=LEVEL, requests_done=1, requests_total=2**40),
            "requests_total",
        ),
        (
            _message(
                "level_progress", trial=0, level=LEVEL, requests_done=1, num_requests_waiting=2**31
            ),
            "num_requests_waiting",
        ),
        (
            _message(
                "hello",
                agent_version="0.1",
                host={"gpus": [{"name": "H100", "memory_mib": 2**31}], "cpu_count": 1},
            ),
            "host.gpus[0].memory_mib",
        ),
        (
            _message("hello", agent_version="0.1", host={"cpu_count": 2**31}),
            "host.cpu_count",
        ),
        (
            _message(
                "measurement",
                trial=0,
                level=LEVEL,
                result=RESULT | {"total_output_tokens": 10**400},
            ),
            "result.total_output_tokens",
        ),
        (
            _message(
                "measurement",
                trial=0,
                level=LEVEL,
                result=RESULT,
                server={"tokens": [[1, -(2**63) - 1]]},
            ),
            "server",
        ),
        (
            _message(
                "measurement", trial=0, level=LEVEL, result=RESULT | {"p99_ttft_ms": float("nan")}
            ),
            "result.p99_ttft_ms",
        ),
        (_message("heartbeat", sent_at=float("inf")), "sent_at"),
        (_message("cold_start_phase", trial=0, phase="ready", seconds=float("inf")), "seconds"),
    ],
    ids=[
        "seq beyond bigint",
        "seq 2**64",
        "trial beyond its range",
        "concurrency beyond integer",
        "requests done",
        "requests total",
        "requests waiting",
        "GPU memory",
        "CPU count",
        "a 400-digit token count",
        "a huge negative figure",
        "NaN in a result",
        "infinite clock",
        "infinite seconds",
    ],
)
def test_it_refuses_numbers_that_do_not_fit_where_the_site_stores_them(data, field):
    assert field in _refused_fields(data)


def test_it_names_the_figure_that_is_out_of_range():
    errors = {"timeout": {"count": 1}, "http_500": {"count": 10**30}}
    data = _message("measurement", trial=0, level=LEVEL, result=RESULT | {"errors": errors})
    with pytest.raises(pydantic.ValidationError) as caught:
        protocol.parse_agent_message(data)
    (error,) = protocol.agent_message_errors(caught.value)
    assert error.field == "result.errors.http_500.count"
    assert "less than or equal to 9223372036854775807" in error.message


@pytest.mark.parametrize(
    "data",
    [
        _message("heartbeat", seq=protocol.BIGINT_COLUMN_MAX, trial=10_000),
        _message(
            "level_progress",
            trial=0,
            level={"concurrency": protocol.MAX_CONCURRENCY},
            requests_done=protocol.INTEGER_COLUMN_MAX,
            num_requests_waiting=protocol.INTEGER_COLUMN_MAX,
        ),
        _message(
            "measurement",
            trial=0,
            level=LEVEL,
            result=RESULT
            | {
                "total_output_tokens": protocol.BIGINT_COLUMN_MAX,
                "usage_missing": -protocol.BIGINT_COLUMN_MAX,
            },
        ),
    ],
    ids=["largest seq", "largest counts", "largest figure"],
)
def test_it_accepts_the_largest_numbers_that_fit(data):
    assert protocol.parse_agent_message(data).seq == data["seq"]


def test_acks_and_rejections_carry_only_storable_seqs():
    assert protocol.Ack(seq=protocol.BIGINT_COLUMN_MAX).seq == protocol.BIGINT_COLUMN_MAX
    with pytest.raises(pydantic.ValidationError):
        protocol.Rejected(seq=protocol.BIGINT_COLUMN_MAX + 1, reason="x")
