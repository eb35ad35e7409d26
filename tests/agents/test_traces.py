"""Published request traces (issue 19): Mooncake JSONL, BurstGPT CSV and the Azure trace CSV
read into one shape, or refused with the line and field that is wrong — never another
exception, whatever bytes arrive."""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.loadgen.prompts import ShareGptPrompts
from agents.workloads import Trace, TraceError, TraceRequest, parse_trace

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ONE = {"timestamp": 0, "input_length": 1, "output_length": 1}


def mooncake(*items: dict) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode()


def refusal(data: bytes, trace_format: str, **options) -> TraceError:
    with pytest.raises(TraceError) as caught:
        parse_trace(data, trace_format, **options)
    return caught.value


@pytest.mark.parametrize(
    ("name", "trace_format", "count", "skipped"),
    [
        ("mooncake.jsonl", "mooncake", 24, 0),
        ("burstgpt.csv", "burstgpt", 22, 2),
        ("azure.csv", "azure", 24, 0),
    ],
)
def test_the_shipped_examples_parse(name, trace_format, count, skipped):
    trace = parse_trace((EXAMPLES / name).read_bytes(), trace_format)
    assert (len(trace.requests), trace.skipped) == (count, skipped)
    assert trace.requests[0].offset == 0
    offsets = [request.offset for request in trace.requests]
    assert offsets == sorted(offsets)


def test_mooncake_times_are_milliseconds_from_the_first_request_and_hash_ids_kept():
    trace = parse_trace(
        mooncake(
            {"timestamp": 2500, "input_length": 1000, "output_length": 7, "hash_ids": [4, 9]},
            {"timestamp": 1000, "input_length": 12, "output_length": 3, "extra": "ignored"},
        ),
        "mooncake",
    )
    assert trace.requests == (
        TraceRequest(0.0, 12, 3),
        TraceRequest(1.5, 1000, 7, (4, 9)),
    )
    assert trace.span == 1.5
    assert trace.mean_rate == pytest.approx(1 / 1.5)


@pytest.mark.parametrize(
    ("item", "field", "words"),
    [
        ({"input_length": 1, "output_length": 1}, "timestamp", "missing"),
        ({"timestamp": "soon", "input_length": 1, "output_length": 1}, "timestamp", "'soon'"),
        ({"timestamp": -5, "input_length": 1, "output_length": 1}, "timestamp", "-5"),
        ({"timestamp": 0, "input_length": 0, "output_length": 1}, "input_length", "got 0"),
        ({"timestamp": 0, "input_length": 1.5, "output_length": 1}, "input_length", "1.5"),
        ({"timestamp": 0, "input_length": True, "output_length": 1}, "input_length", "true"),
        ({"timestamp": 0, "input_length": 1, "output_length": 10**9}, "output_length", "10000"),
        (ONE | {"hash_ids": 3}, "hash_ids", "list"),
        (ONE | {"hash_ids": [-1]}, "hash_ids[0]", "-1"),
        (
            {"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]},
            "hash_ids",
            "fill only 1",
        ),
    ],
)
def test_a_bad_mooncake_line_is_refused_by_line_and_field(item, field, words):
    good = {"timestamp": 0, "input_length": 5, "output_length": 5}
    error = refusal(mooncake(good, item), "mooncake")
    assert (error.line, error.field) == (2, field)
    assert words in str(error)
    assert str(error).startswith(f"line 2: {field}: ")


def test_mooncake_lines_that_are_not_objects_are_refused_and_blank_lines_skipped():
    assert refusal(b'\n\n{"timestamp": 0,\n', "mooncake").line == 3
    assert "JSON object" in str(refusal(b"[1, 2]\n", "mooncake"))
    assert (
        len(
            parse_trace(
                mooncake({"timestamp": 0, "input_length": 1, "output_length": 1}) + b"\n   \n",
                "mooncake",
            ).requests
        )
        == 1
    )


def test_the_block_size_decides_how_many_hash_ids_fit():
    item = {"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [1, 2, 3, 4]}
    assert parse_trace(mooncake(item), "mooncake", block_size=25).requests[0].hash_ids == (
        1,
        2,
        3,
        4,
    )
    assert refusal(mooncake(item), "mooncake", block_size=34).field == "hash_ids"
    assert "block_size" in str(refusal(mooncake(item), "mooncake", block_size=0))


def test_burstgpt_skips_failed_requests_and_filters_by_model_and_log_type():
    data = (
        BURSTGPT_HEADER
        + "10.5,ChatGPT,100,20,120,Conversation log\n"
        + "11,GPT-4,200,0,200,API log\n"
        + "12.25,GPT-4,300,30,330,API log\n"
        + "13,ChatGPT,400,40,440,API log\n"
    ).encode()
    assert [r.input_len for r in parse_trace(data, "burstgpt").requests] == [100, 300, 400]
    gpt4 = parse_trace(data, "burstgpt", model="GPT-4")
    assert (gpt4.requests, gpt4.skipped) == ((TraceRequest(0.0, 300, 30),), 3)
    api = parse_trace(data, "burstgpt", model="ChatGPT", log_type="API log")
    assert [r.input_len for r in api.requests] == [400]
    assert "no usable request (4 rows left out" in str(refusal(data, "burstgpt", model="Claude"))


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ("x,ChatGPT,1,1,2,API log", "Timestamp"),
        ("1,ChatGPT,-3,1,2,API log", "Request tokens"),
        ("1,ChatGPT,3,1.25,4,API log", "Response tokens"),
    ],
)
def test_a_bad_burstgpt_row_is_refused_by_line_and_column(row, field):
    error = refusal(
        (BURSTGPT_HEADER + "1,ChatGPT,1,1,2,API log\n" + row + "\n").encode(), "burstgpt"
    )
    assert (error.line, error.field) == (3, field)


def test_a_csv_without_the_columns_or_with_short_rows_is_refused():
    assert "no column 'Log Type'" in str(
        refusal(b"Timestamp,Model,Request tokens,Response tokens\n", "burstgpt")
    )
    short = refusal((AZURE_HEADER + "2023-11-16 18:15:46.1,5\n").encode(), "azure")
    assert short.line == 2 and "2 values" in str(short)
    assert "empty" in str(refusal(b"", "azure"))
    assert "UTF-8" in str(refusal(AZURE_HEADER.encode() + b"\xff\xfe\n", "azure"))


def test_azure_timestamps_with_seven_fractional_digits_become_offsets():
    data = (
        AZURE_HEADER
        + "2023-11-16 18:15:46.6805900,374,44\n"
        + "2023-11-16 18:15:50.9951690,396,109\n"
        + "2023-11-16 18:15:46.1805900,10,0\n"
    ).encode()
    trace = parse_trace(data, "azure")
    assert [(round(r.offset, 6), r.input_len, r.output_len) for r in trace.requests] == [
        (0.0, 374, 44),
        (4.314579, 396, 109),
    ]
    assert trace.skipped == 1
    bad = refusal((AZURE_HEADER + "16/11/2023,1,1\n").encode(), "azure")
    assert (bad.line, bad.field) == (2, "TIMESTAMP")


def test_an_unknown_format_is_refused():
    assert "one of mooncake, burstgpt, azure" in str(refusal(b"", "sharegpt"))


def test_a_window_rebases_its_requests_and_refuses_an_empty_one():
    trace = Trace("azure", tuple(TraceRequest(float(t), 1, 1) for t in range(10)))
    window = trace.window(2.5, 4)
    assert [r.offset for r in window.requests] == [0.0, 1.0, 2.0, 3.0]
    assert window.mean_rate == 1.0
    assert len(trace.window(7).requests) == 3
    with pytest.raises(TraceError, match="no request in the window from 20 s"):
        trace.window(20)
    assert Trace("azure", (TraceRequest(0.0, 1, 1),)).mean_rate == math.inf


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=300), trace_format=st.sampled_from(["mooncake", "burstgpt", "azure"])
)
def test_any_bytes_give_a_trace_or_a_trace_error(data, trace_format):
    with contextlib.suppress(TraceError):
        parse_trace(data, trace_format)


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.one_of(
            st.none(),
            st.booleans(),
            st.integers(),
            st.floats(),
            st.text(max_size=5),
            st.lists(st.integers(), max_size=3),
        ),
        min_size=4,
        max_size=4,
    )
)
def test_any_json_values_give_a_trace_or_a_trace_error(values):
    keys = ("timestamp", "input_length", "output_length", "hash_ids")
    line = json.dumps(dict(zip(keys, values, strict=True))).encode()
    with contextlib.suppress(TraceError):
        parse_trace(line, "mooncake")


@pytest.mark.parametrize("trace_format", ["mooncake", "burstgpt", "azure"])
def test_a_value_no_check_foresaw_is_refused_by_its_line(monkeypatch, trace_format):
    # Stands for any failure a field's own check misses: the line still names itself.
    def fails(*args, **kwargs):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr("agents.workloads.traces._whole", fails)
    lines = {
        "mooncake": mooncake(ONE),
        "burstgpt": (BURSTGPT_HEADER + "0,ChatGPT,1,1,2,API log\n").encode(),
        "azure": (AZURE_HEADER + "2023-11-16 18:15:46.6805900,1,1\n").encode(),
    }
    error = refusal(lines[trace_format], trace_format)
    assert (error.line, str(error)) == (
        1 if trace_format == "mooncake" else 2,
        f"line {error.line}: cannot be read (ZeroDivisionError)",
    )


def test_the_shipped_sharegpt_example_gives_its_conversations():
    prompts = ShareGptPrompts(EXAMPLES / "sharegpt.json").load()
    assert [p.text.split()[0] for p in prompts] == ["Write", "What", "Give"]
