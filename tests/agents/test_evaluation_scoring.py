"""Scorers, a score's 95 % interval and drift between two configurations' answers
(issue 38): each scorer on answers it must pass and fail, the interval against Wilson's
published figures, drift on answers that differ on known items."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents import protocol
from agents.evaluation import (
    Answer,
    drift,
    judge_prompt,
    judge_verdict,
    paired_difference,
    parse_evaluation_set,
    score_interval,
    score_output,
    wilson,
)
from agents.evaluation.scorers import last_number, normalise


def item(reference=None, **scorer):
    line = {"prompt": "What is the answer?", "scorer": scorer}
    if reference is not None:
        line["reference"] = reference
    return parse_evaluation_set(json.dumps(line).encode()).items[0]


def score(one, output):
    return score_output(one, output).score


def test_exact_match_ignores_only_surrounding_whitespace():
    one = item("Paris", kind="exact")
    assert score(one, " Paris\n") == 1.0
    assert score(one, "paris") == 0.0 and score(one, "Paris.") == 0.0


def test_normalised_match_folds_case_punctuation_articles_and_spaces():
    one = item("The Eiffel Tower", kind="normalised")
    assert score(one, "eiffel   tower!") == 1.0
    assert score(one, "the Eiffel Tower, Paris") == 0.0
    assert normalise("Ｆｕｌｌ-width  A  Test") == "fullwidth test"


def test_contains_is_case_sensitive_unless_told():
    assert score(item("Paris", kind="contains"), "It is Paris, France.") == 1.0
    assert score(item("Paris", kind="contains"), "it is paris") == 0.0
    assert score(item("Paris", kind="contains", ignore_case=True), "it is paris") == 1.0


def test_regex_searches_the_output():
    one = item(kind="regex", pattern=r"^\d{3}-\d{4}$")
    assert score(one, "555-1234") == 1.0 and score(one, "call 555-1234") == 0.0
    assert score(item(kind="regex", pattern="yes", ignore_case=True), "YES!") == 1.0


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("42", 1.0),
        ("The answer is 42.", 1.0),
        ("6 x 7 = 42", 1.0),
        ("42.0", 1.0),
        ("41", 0.0),
        ("I don't know", 0.0),
        ("42 or 43", 0.0),
    ],
)
def test_numeric_takes_the_last_number(output, expected):
    assert score(item("42", kind="numeric"), output) == expected


def test_numeric_tolerance_absolute_and_relative():
    assert score(item("3.14159", kind="numeric", tolerance=0.01), "pi is 3.14") == 1.0
    assert score(item("3.14159", kind="numeric", tolerance=0.001), "pi is 3.14") == 0.0
    assert score(item("1000", kind="numeric", relative_tolerance=0.01), "1,009") == 1.0
    assert score(item("1000", kind="numeric", relative_tolerance=0.01), "1,011") == 0.0
    assert last_number("from -3 to 1,234.5 units") == 1234.5
    assert last_number("minus -7") == -7


def test_json_schema_validity():
    one = item(
        kind="json_schema",
        schema={"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}},
    )
    assert score(one, '{"city": "Oslo"}') == 1.0
    assert score(one, '```json\n{"city": "Oslo"}\n```') == 1.0
    assert score(one, '{"city": 3}') == 0.0
    assert score_output(one, "city: Oslo").detail == "not JSON"
    unresolvable = item(kind="json_schema", schema={"$ref": "https://example.invalid/s.json"})
    verdict = score_output(unresolvable, "{}")
    assert verdict.score == 0.0 and "cannot be resolved" in verdict.detail


def test_a_judge_item_is_asked_with_its_rubric_and_read_from_the_reply():
    one = item(
        "Paris",
        kind="judge",
        max_score=10,
        rubric="Q: {prompt}\nReference: {reference}\nAnswer: {output}\nKeep {braces}.",
    )
    asked = judge_prompt(one, "Paris, of course")
    assert asked.startswith("Q: What is the answer?\nReference: Paris\nAnswer: Paris, of course")
    assert "Keep {braces}." in asked and asked.endswith("from 0 to 10.")
    assert judge_verdict(one, "Good answer.\nSCORE: 8").score == 0.8
    assert judge_verdict(one, "Score: 2 ... on reflection, score = 9").score == 0.9
    assert judge_verdict(one, "**Score:** 10").score == 1.0
    assert judge_verdict(one, "Great answer!").score is None
    assert judge_verdict(one, "SCORE: 11").score is None
    with pytest.raises(ValueError, match="judge"):
        score_output(one, "Paris")


@given(st.text(max_size=200))
def test_no_output_makes_a_scorer_raise(output):
    for one in (
        item("4", kind="numeric"),
        item("a", kind="normalised"),
        item(kind="json_schema", schema={"type": "array"}),
    ):
        assert score(one, output) in (0.0, 1.0)


def test_the_wilson_interval_matches_published_figures():
    # Newcombe (1998), Statistics in Medicine 17:857, Table I: 81/263 → 0.2553–0.3662;
    # 15/148 → 0.0624–0.1605; 0/20 → 0–0.1611.
    for successes, n, low, high in [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
    ]:
        interval = wilson(successes, n)
        assert (round(interval.low, 4), round(interval.high, 4)) == (low, high)
        assert interval.value == successes / n and interval.n == n


@pytest.mark.parametrize("n", range(1, 301))
def test_the_interval_holds_an_all_right_or_all_wrong_score(n):
    # All 80 of the built-in pack right once gave a high end of 0.9999999999999999: a
    # summary the protocol refuses (low <= score <= high).
    for right in (n, 0):
        interval = score_interval([1.0] * right + [0.0] * (n - right))
        assert interval.low <= interval.value <= interval.high
        protocol.EvaluationSummary(
            score=interval.value, low=interval.low, high=interval.high, items=n, scored=n
        )


def test_partial_scores_use_the_mean_in_wilsons_interval():
    interval = score_interval([0.5] * 10 + [1.0] * 10)
    assert interval.value == 0.75
    assert (interval.low, interval.high) == (wilson(15, 20).low, wilson(15, 20).high)
    with pytest.raises(ValueError):
        score_interval([])


def test_the_paired_difference_is_a_t_interval():
    interval = paired_difference([1, 0, 0, 0, -1, 0, 1, 0])
    assert interval.value == 0.125 and interval.n == 8
    # mean 0.125, sd 0.6409, t(0.975, 7) = 2.3646: half-width 0.5358
    assert interval.low == pytest.approx(-0.4108, abs=1e-4)
    assert interval.high == pytest.approx(0.6608, abs=1e-4)
    assert paired_difference([0.0, 0.0]).low == paired_difference([0.0, 0.0]).high == 0.0


def test_drift_counts_changed_answers_and_the_scored_difference():
    reference = {f"q{i}": Answer(f"answer {i}", 1.0) for i in range(10)}
    candidate = dict(reference)
    candidate["q3"] = Answer("something else", 0.0)
    candidate["q7"] = Answer("answer 7 ", 1.0)  # whitespace only: unchanged
    candidate["q8"] = Answer("answer eight", 1.0)  # changed, still right
    del candidate["q9"]
    result = drift(reference, candidate)
    assert (result.compared, result.changed, result.missing) == (9, ("q3", "q8"), 1)
    assert result.changed_share.value == pytest.approx(2 / 9)
    assert result.changed_share.low == wilson(2, 9).low
    assert result.score_difference.value == pytest.approx(-1 / 9)


def test_drift_without_references_has_no_scored_difference():
    result = drift({"a": Answer("x")}, {"a": Answer("y")})
    assert result.changed == ("a",) and result.score_difference is None
    assert drift({}, {}).changed_share is None
