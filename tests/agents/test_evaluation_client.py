"""Running an evaluation set against OpenAI-compatible stand-ins on 127.0.0.1 (issue 38): a
served model right on a known share of the items gets that share as its score with Wilson's
interval; a judge is asked through a second stand-in; two stand-ins differing on known items
drift on exactly those; failures are scored as the module promises; a pinned target is
reached at the addresses given, never at what its name answers."""

from __future__ import annotations

import json
import re

import pytest

from agents.evaluation import EvaluationSet, drift, parse_evaluation_set, wilson
from agents.evaluation.client import OpenAITarget, run_evaluation
from agents.evaluation.packs import load_pack
from runs.demo.stand_in import StandInServer, right_except

PACK = load_pack("arithmetic")
ANSWERS = {item.prompt: item.reference for item in PACK.items}
_NUMBER = re.compile(r"\d+")


async def test_the_score_is_the_share_answered_right_with_wilsons_interval():
    wrong = {item.id for item in PACK.items[::4]}  # 20 of 80 wrong: 75 % right
    with StandInServer(right_except(PACK, wrong), delay_s=0.01) as served:
        outcome = await run_evaluation(
            PACK, OpenAITarget(served.url, "tiny"), seed=38, concurrency=3
        )
    assert outcome.score.value == 0.75 and outcome.score.n == 80
    expected = wilson(60, 80)
    assert (outcome.score.low, outcome.score.high) == (expected.low, expected.high)
    assert outcome.score.low < 0.75 < outcome.score.high
    assert [o.item_id for o in outcome.outcomes] == [item.id for item in PACK.items]
    assert all(o.latency_s > 0 for o in outcome.outcomes)
    assert (outcome.failed, outcome.unscored) == (0, 0)
    # Greedy, seeded, short, at a modest concurrency.
    sent = served.requests
    assert len(sent) == 80 and 1 <= served.peak_in_flight <= 3
    assert {(r["temperature"], r["seed"], r["max_completion_tokens"]) for r in sent} == {
        (0.0, 38, 16)
    }
    assert all(r["model"] == "tiny" and r["stream"] is False for r in sent)


async def test_a_failed_request_scores_zero_and_says_why():
    failing = PACK.items[0].prompt

    def answer(prompt: str) -> str | None:
        return None if prompt == failing else ANSWERS[prompt]

    with StandInServer(answer) as served:
        outcome = await run_evaluation(PACK, OpenAITarget(served.url, "tiny"))
    first = outcome.outcomes[0]
    assert (first.output, first.score, first.error) == (None, 0.0, "http_500")
    assert outcome.failed == 1 and outcome.score.value == 79 / 80
    assert PACK.items[0].id not in outcome.answers()


async def test_an_unreachable_server_fails_every_item_without_raising():
    with StandInServer(lambda prompt: "1") as served:
        url = served.url
    outcome = await run_evaluation(PACK, OpenAITarget(url, "tiny"), concurrency=2)
    assert outcome.failed == 80 and outcome.score.value == 0.0
    assert {o.error for o in outcome.outcomes} == {"transport"}


def judged_set(*answers: tuple[str, str]) -> bytes:
    lines = [
        {
            "set": {
                "scorer": {
                    "kind": "judge",
                    "max_score": 4,
                    "rubric": "Question: {prompt}\nExpected: {reference}\n"
                    "Answer: {output}\nGrade it.",
                }
            }
        }
    ]
    lines += [
        {"id": f"j{i}", "messages": [{"role": "user", "content": prompt}], "reference": reference}
        for i, (prompt, reference) in enumerate(answers)
    ]
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def grader(prompt: str) -> str:
    """A judge: 4 when the answer equals the expected text, 1 when it only contains it, and
    no score at all for an answer that says 'confuse'."""
    expected = re.search(r"Expected: (.*)\n", prompt).group(1)
    answer = re.search(r"Answer: (.*)\nGrade it", prompt).group(1)
    if "confuse" in answer:
        return "I cannot grade this."
    return f"Reasoning...\nSCORE: {4 if answer == expected else 1 if expected in answer else 0}"


async def test_a_judge_scores_through_a_second_endpoint():
    evaluation = parse_evaluation_set(
        judged_set(
            ("Capital of France?", "Paris"),
            ("Capital of Italy?", "Rome"),
            ("Capital of Spain?", "Madrid"),
            ("Say confuse", "ok"),
        )
    )
    replies = {
        "Capital of France?": "Paris",
        "Capital of Italy?": "It is Rome",
        "Capital of Spain?": "Lisbon",
        "Say confuse": "confuse",
    }
    with StandInServer(replies.get) as served, StandInServer(grader) as judge:
        outcome = await run_evaluation(
            evaluation,
            OpenAITarget(served.url, "tiny"),
            judge=OpenAITarget(judge.url, "judge-model", api_key="k"),
        )
    assert [o.score for o in outcome.outcomes] == [1.0, 0.25, 0.0, None]
    assert outcome.unscored == 1 and outcome.score.n == 3
    assert outcome.score.value == pytest.approx(1.25 / 3)
    assert outcome.outcomes[0].judge_reply.endswith("SCORE: 4")
    assert "no 'SCORE: n' line" in outcome.outcomes[3].detail
    asked = [r["messages"][0]["content"] for r in judge.requests]
    assert any("Expected: Rome\nAnswer: It is Rome" in text for text in asked)
    assert {r["model"] for r in judge.requests} == {"judge-model"}
    assert all(r["temperature"] == 0.0 for r in judge.requests)


async def test_a_failing_judge_leaves_items_unscored():
    evaluation = parse_evaluation_set(judged_set(("Capital of France?", "Paris")))
    with StandInServer(lambda prompt: "Paris") as served, StandInServer(lambda p: None) as judge:
        outcome = await run_evaluation(
            evaluation, OpenAITarget(served.url, "m"), judge=OpenAITarget(judge.url, "j")
        )
    (only,) = outcome.outcomes
    assert (only.output, only.score, only.error) == ("Paris", None, "judge_http_500")
    assert outcome.score is None


async def test_a_judge_set_needs_a_judge():
    evaluation = parse_evaluation_set(judged_set(("Capital of France?", "Paris")))
    with pytest.raises(ValueError, match="judge endpoint"):
        await run_evaluation(evaluation, OpenAITarget("http://127.0.0.1:9", "m"))


async def test_drift_between_two_servers_differing_on_known_items():
    half = EvaluationSet(PACK.items[:40])
    differs = {item.id for item in half.items[5:12]}  # 7 items: wrong on the candidate

    def rephrased(prompt: str) -> str:
        # Right, but worded differently on 3 more items: changed, not worse.
        if prompt in {item.prompt for item in half.items[30:33]}:
            return f"The answer is {ANSWERS[prompt]}."
        return right_except(half, differs)(prompt)

    with (
        StandInServer(right_except(PACK, set())) as baseline,
        StandInServer(rephrased) as candidate,
    ):
        reference = await run_evaluation(half, OpenAITarget(baseline.url, "bf16"))
        other = await run_evaluation(half, OpenAITarget(candidate.url, "fp8"))
    result = drift(reference.answers(), other.answers())
    expected = {item.id for item in half.items[5:12]} | {item.id for item in half.items[30:33]}
    assert set(result.changed) == expected and result.compared == 40
    assert result.changed_share.value == 10 / 40
    assert result.score_difference.value == pytest.approx(-7 / 40)
    assert result.score_difference.high < 0  # seven worse, none better: a real drop


async def test_prompt_items_may_go_to_the_completions_endpoint():
    with StandInServer(right_except(PACK, set())) as served:
        outcome = await run_evaluation(PACK, OpenAITarget(served.url, "m"), endpoint="completions")
    assert outcome.score.value == 1.0
    assert {("prompt" in r, r["max_tokens"]) for r in served.requests} == {(True, 16)}


async def test_a_pinned_target_is_reached_at_its_addresses_under_its_own_name():
    evaluation = parse_evaluation_set(
        judged_set(("Capital of France?", "Paris"), ("Capital of Italy?", "Rome"))
    )
    replies = {"Capital of France?": "Paris", "Capital of Italy?": "Rome"}
    with StandInServer(replies.get) as served, StandInServer(grader) as judge:
        served_port, judge_port = served.url.rsplit(":", 1)[1], judge.url.rsplit(":", 1)[1]
        # Names that resolve nowhere: only the addresses given reach the stand-ins; the
        # first refuses (nothing listens on 127.0.0.2), the next one answers.
        outcome = await run_evaluation(
            evaluation,
            OpenAITarget(
                f"http://served.invalid:{served_port}", "tiny", addresses=("127.0.0.2", "127.0.0.1")
            ),
            judge=OpenAITarget(
                f"http://judge.invalid:{judge_port}", "judge-model", addresses=("127.0.0.1",)
            ),
        )
    assert [o.score for o in outcome.outcomes] == [1.0, 1.0]
    assert set(served.hosts) == {f"served.invalid:{served_port}"}
    assert set(judge.hosts) == {f"judge.invalid:{judge_port}"}
    # Unpinned, the same name is looked up and answers nothing: every item fails.
    with StandInServer(replies.get) as served:
        port = served.url.rsplit(":", 1)[1]
        plain = await run_evaluation(
            parse_evaluation_set(
                b'{"prompt": "Capital of France?", "reference": "Paris", '
                b'"scorer": {"kind": "exact"}}\n'
            ),
            OpenAITarget(f"http://served.invalid:{port}", "tiny"),
        )
    assert plain.failed == 1 and served.requests == []
