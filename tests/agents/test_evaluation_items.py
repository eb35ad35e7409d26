"""Evaluation sets (issue 38): the JSONL format read into items with their scorers resolved,
or refused with the line and field at fault — never another exception, whatever bytes arrive;
and the built-in pack, whose every answer is recomputed here."""

from __future__ import annotations

import contextlib
import json
import operator
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.evaluation import EvaluationSetError, parse_evaluation_set
from agents.evaluation.items import DEFAULT_MAX_TOKENS
from agents.evaluation.packs import BUILTIN_PACKS, load_pack


def jsonl(*lines: dict) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def refusal(data: bytes) -> EvaluationSetError:
    with pytest.raises(EvaluationSetError) as caught:
        parse_evaluation_set(data)
    return caught.value


def test_it_reads_items_with_their_own_or_the_sets_scorer():
    parsed = parse_evaluation_set(
        jsonl(
            {"set": {"scorer": {"kind": "numeric", "tolerance": 0.5}, "max_tokens": 8}},
            {"id": "a", "prompt": "2+2?", "reference": 4},
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Capital of France?"},
                ],
                "reference": "Paris",
                "scorer": {"kind": "normalised"},
                "max_tokens": 20,
            },
            {
                "id": 7,
                "prompt": "JSON please",
                "scorer": {"kind": "json_schema", "schema": {"type": "object"}},
            },
        )
    )
    first, second, third = parsed.items
    assert (first.id, first.scorer.kind, first.scorer.tolerance, first.max_tokens) == (
        "a",
        "numeric",
        0.5,
        8,
    )
    assert first.reference == "4" and first.line == 2
    assert (second.id, second.scorer.kind, second.max_tokens) == ("line-3", "normalised", 20)
    assert second.messages[1] == {"role": "user", "content": "Capital of France?"}
    assert second.prompt_text == "system: Be brief.\n\nuser: Capital of France?"
    assert (third.id, third.reference, third.scorer.json_schema) == ("7", None, {"type": "object"})
    assert parsed.summary() == {
        "items": 3,
        "needs_judge": False,
        "with_reference": 2,
        "scorers": {"json_schema": 1, "normalised": 1, "numeric": 1},
    }


def test_an_item_without_the_sets_defaults_gets_the_default_length():
    parsed = parse_evaluation_set(
        jsonl({"prompt": "hi", "scorer": {"kind": "regex", "pattern": "h(i|ello)"}})
    )
    assert parsed.items[0].max_tokens == DEFAULT_MAX_TOKENS
    assert not parsed.needs_judge


@pytest.mark.parametrize(
    ("lines", "line", "field", "words"),
    [
        ([{"prompt": "x", "reference": "y"}], 1, "scorer", "no scorer"),
        ([{"prompt": "x", "scorer": {"kind": "exact"}}], 1, "reference", "needs a reference"),
        (
            [{"prompt": "x", "reference": "seven", "scorer": {"kind": "numeric"}}],
            1,
            "reference",
            "needs a number",
        ),
        (
            [{"prompt": "x", "reference": "1", "scorer": {"kind": "numeric", "tolerance": -1}}],
            1,
            "scorer.tolerance",
            "greater than or equal to 0",
        ),
        (
            [{"prompt": "x", "scorer": {"kind": "regex", "pattern": "(unclosed"}}],
            1,
            "scorer.pattern",
            "not a regular expression",
        ),
        (
            [{"prompt": "x", "scorer": {"kind": "json_schema", "schema": {"type": "thing"}}}],
            1,
            "scorer.schema",
            "not a valid JSON Schema",
        ),
        (
            [{"prompt": "x", "scorer": {"kind": "judge", "rubric": "Is it good?"}}],
            1,
            "scorer.rubric",
            "{output}",
        ),
        ([{"prompt": "x", "scorer": {"kind": "bleu"}}], 1, "scorer.kind", "unknown value"),
        (
            [
                {
                    "prompt": "x",
                    "messages": [{"role": "user", "content": "y"}],
                    "scorer": {"kind": "exact"},
                    "reference": "z",
                }
            ],
            1,
            None,
            "either 'prompt' or",
        ),
        (
            [
                {
                    "messages": [{"role": "robot", "content": "y"}],
                    "scorer": {"kind": "regex", "pattern": "."},
                }
            ],
            1,
            "messages[0].role",
            "'system', 'user' or 'assistant'",
        ),
        (
            [{"set": {"scorer": {"kind": "exact"}}}, {"prompt": "x", "reference": "y", "extra": 1}],
            2,
            "extra",
            "unknown field",
        ),
        (
            [
                {"id": "q", "prompt": "x", "reference": "y", "scorer": {"kind": "exact"}},
                {"id": "q", "prompt": "x", "reference": "y", "scorer": {"kind": "exact"}},
            ],
            2,
            "id",
            "already the id of line 1",
        ),
        (
            [
                {"prompt": "x", "reference": "y", "scorer": {"kind": "exact"}},
                {"set": {"max_tokens": 3}},
            ],
            2,
            "set",
            "first line",
        ),
        (
            [{"prompt": "x", "reference": "y", "scorer": {"kind": "exact"}, "max_tokens": 0}],
            1,
            "max_tokens",
            "greater than or equal to 1",
        ),
    ],
)
def test_a_bad_line_is_refused_by_line_and_field(lines, line, field, words):
    error = refusal(jsonl(*lines))
    assert (error.line, error.field) == (line, field)
    assert words in str(error)
    assert str(error).startswith(f"line {line}:")


def test_text_that_is_not_json_or_utf8_or_empty_is_refused():
    good = b'{"prompt": "x", "scorer": {"kind": "regex", "pattern": "."}}\n'
    assert str(refusal(good + b"{not json\n")).startswith("line 2: not JSON")
    assert refusal(b"[1, 2]\n").reason == "each line is a JSON object"
    assert refusal(good + b"\xff\xfe").line == 2
    assert str(refusal(b"\n\n")) == "no item"
    assert str(refusal(jsonl({"set": {"max_tokens": 4}}))) == "no item"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_give_a_set_or_the_sets_error(data):
    with contextlib.suppress(EvaluationSetError):
        parse_evaluation_set(data)


@settings(max_examples=100, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    ["prompt", "scorer", "kind", "schema", "reference", "pattern", "messages"]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=10,
    )
)
def test_any_json_line_gives_a_set_or_the_sets_error(value):
    with contextlib.suppress(EvaluationSetError):
        parse_evaluation_set(json.dumps(value).encode())


_ARITHMETIC = re.compile(r"What is (\d+) ([-+*/]) (\d+)\? Reply with the number only\.")
_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def test_the_arithmetic_pack_answers_are_right_and_its_licence_is_stated():
    pack = load_pack("arithmetic")
    assert set(BUILTIN_PACKS) == {"arithmetic"}
    assert len(pack.items) == 80 and "no outside data" in pack.licence
    for item in pack.items:
        a, op, b = _ARITHMETIC.fullmatch(item.prompt).groups()
        assert float(item.reference) == _OPERATORS[op](int(a), int(b)), item.id
        assert item.scorer.kind == "numeric" and item.scorer.tolerance == 0
