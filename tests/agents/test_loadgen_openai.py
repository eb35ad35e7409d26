"""The request sent and the stream read, with exact (injected) arrival times."""

from __future__ import annotations

import json

import pytest

from agents.loadgen import openai
from agents.loadgen.http import HttpError, parse_base_url
from agents.loadgen.openai import StreamConsumer, encode_request
from agents.loadgen.records import RequestRecord

ORIGIN = parse_base_url("http://127.0.0.1:8000/proxy")


@pytest.fixture(autouse=True, params=["fast", "stdlib"])
def json_parser(request, monkeypatch):
    """Every stream test runs with orjson and with the stdlib fallback."""
    if request.param == "stdlib":
        monkeypatch.setattr(openai, "_loads", openai._stdlib_loads)
    return request.param


def split_request(raw: bytes) -> tuple[list[str], dict]:
    head, body = raw.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert int(headers["Content-Length"]) == len(body)
    return lines, headers | {"body": json.loads(body)}


def test_a_completions_request_asks_for_usage_and_the_exact_length():
    lines, parsed = split_request(
        encode_request(ORIGIN, endpoint="completions", model="m", prompt="hi", output_len=7)
    )
    assert lines[0] == "POST /proxy/v1/completions HTTP/1.1"
    assert parsed["Host"] == "127.0.0.1:8000"
    assert "Authorization" not in parsed
    assert parsed["body"] == {
        "model": "m",
        "temperature": 0.0,
        "stream": True,
        "prompt": "hi",
        "max_tokens": 7,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }


def test_a_chat_request_sends_messages_and_the_key():
    raw = encode_request(
        ORIGIN, endpoint="chat", model="m", prompt="hi", output_len=3, api_key="sk-test"
    )
    lines, parsed = split_request(raw)
    assert lines[0] == "POST /proxy/v1/chat/completions HTTP/1.1"
    assert parsed["Authorization"] == "Bearer sk-test"
    assert parsed["body"]["messages"] == [{"role": "user", "content": "hi"}]
    assert parsed["body"]["max_completion_tokens"] == 3


def test_ignore_eos_can_be_left_out_for_apis_that_refuse_it():
    raw = encode_request(
        ORIGIN, endpoint="chat", model="m", prompt="hi", output_len=3, ignore_eos=False
    )
    assert "ignore_eos" not in split_request(raw)[1]["body"]


def sse(*payloads) -> bytes:
    return b"".join(
        b"data: " + (p if isinstance(p, bytes) else json.dumps(p).encode()) + b"\n\n"
        for p in payloads
    )


def consume(parts: list[tuple[float, bytes]], status: int = 200) -> RequestRecord:
    record = RequestRecord(0, 3, start=10.0)
    consumer = StreamConsumer(record)
    consumer.on_head(status, {})
    for now, data in parts:
        consumer.on_body(data, now)
    consumer.finish()
    return record


def content(text: str, id_: str = "cmpl-1") -> dict:
    return {"id": id_, "choices": [{"index": 0, "text": text}], "usage": None}


def test_timings_follow_vllm_semantics():
    record = consume(
        [
            # First message with choices, even with empty text, is the first token.
            (10.100, sse(content(""))),
            (10.120, sse(content(" b", "other-id"), content(" c"))),  # one read, two messages
            (10.150, sse(content(" d"))),
            # The usage-only message and [DONE] come later and do not move E2EL.
            (10.400, sse({"id": "x", "choices": [], "usage": {"completion_tokens": 4}})),
            (10.500, sse(b"[DONE]")),
        ]
    )
    assert record.success and record.response_id == "cmpl-1"
    assert record.ttft == pytest.approx(0.100)
    assert record.itl == pytest.approx([0.020, 0.0, 0.030])
    assert record.latency == pytest.approx(0.150)
    assert record.output_tokens == 4 and record.chunks == 4
    assert record.tpot == pytest.approx(0.050 / 3)


def test_an_error_status_keeps_the_server_message():
    body = json.dumps({"error": {"message": "model not found", "code": 404}}).encode()
    record = consume([(10.1, body)], status=404)
    assert (record.success, record.error_kind, record.error) == (
        False,
        "http_404",
        "model not found",
    )


def test_a_stream_without_content_is_a_failure():
    record = consume([(10.1, sse({"choices": [], "usage": {"completion_tokens": 0}}, b"[DONE]"))])
    assert (record.success, record.error_kind) == (False, "no_content")


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        (b"{not json", "malformed_sse"),
        (b'["a", "list"]', "malformed_sse"),
        (b'{"a": 1} trailing', "malformed_sse"),
        (b"\xff\xfe", "malformed_sse"),
        (json.dumps({"object": "error", "message": "overloaded"}).encode(), "stream_error"),
        (json.dumps({"error": {"message": "overloaded"}}).encode(), "stream_error"),
    ],
)
def test_a_broken_message_aborts_the_stream_with_its_kind(payload, kind):
    # Alone in its read, and among good messages (a read's messages are parsed together).
    for read in (sse(payload), sse(content("a"), payload, content("b"))):
        consumer = StreamConsumer(RequestRecord(0, 3))
        consumer.on_head(200, {})
        with pytest.raises(HttpError) as caught:
            consumer.on_body(read, 1.0)
        assert caught.value.kind == kind


def test_a_read_of_many_messages_counts_each_and_ends_at_done():
    record = consume(
        [
            (10.1, sse(content("a"))),
            (10.3, sse(*(content(f" {i}") for i in range(5)), b"[DONE]")),
        ]
    )
    assert record.chunks == 6 and record.itl == pytest.approx([0.2, 0, 0, 0, 0])


def test_surrounding_whitespace_in_a_payload_is_fine():
    record = consume([(10.2, b'data:   {"choices": [{"text": "x"}]}  \n\n')])
    assert record.success and record.ttft == pytest.approx(0.2)
