"""A trial's evaluation in the runner (issue 38): after its load levels, against the same
server, reported per item with the score and its interval; a judge through a second stand-in;
nothing on the simulator; keys never in a message."""

from __future__ import annotations

import json

import pytest

from agents import protocol
from agents.evaluation import score_interval
from agents.evaluation.client import EvaluationOutcome, ItemOutcome
from agents.runner.evaluation_run import EvaluationKeys, evaluation_parts, trial_evaluation
from agents.runner.trial_engine import EngineOptions
from tests.agents.fake_openai_server import FakeServer
from tests.fakes.openai_answers import FakeAnswers

from .test_endpoint_engine import endpoint_job
from .test_runner import make_job, run

KEY, JUDGE_KEY = "sk-served-secret-77", "sk-judge-secret-88"


def say_set(right: int, wrong: int, judged: int = 0) -> str:
    """Items "Say N" whose reference is N (the stand-in echoes the last word: right) or
    N + 1 (wrong), and judge items the judge scores."""
    lines = [json.dumps({"set": {"scorer": {"kind": "exact"}, "max_tokens": 4}})]
    lines += [
        json.dumps({"id": f"r{i}", "prompt": f"Say {i}", "reference": str(i)}) for i in range(right)
    ]
    lines += [
        json.dumps({"id": f"w{i}", "prompt": f"Say {i}", "reference": str(i + 1)})
        for i in range(wrong)
    ]
    rubric = {"kind": "judge", "rubric": "Rate {output}. End with SCORE: n", "max_score": 4}
    lines += [
        json.dumps({"id": f"j{i}", "prompt": f"Say {i}", "scorer": rubric}) for i in range(judged)
    ]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def server():
    with FakeServer(api_key=KEY) as running:
        yield running


def with_evaluation(job: protocol.JobSpec, **evaluation) -> protocol.JobSpec:
    return job.model_copy(update={"evaluation": protocol.EvaluationJob(**evaluation)})


@pytest.mark.slow
def test_each_trial_is_scored_after_its_levels_on_the_same_server(server, tmp_path):
    with FakeAnswers(lambda prompt: "Fine. SCORE: 3") as judge:
        judge_spec = protocol.EvaluationJudge(base_url=judge.url, model="judge", endpoint_id="j")
        job = with_evaluation(
            endpoint_job(server.base_url, trials=({}, {})),
            set_jsonl=say_set(right=9, wrong=3, judged=2),
            judge=judge_spec,
            concurrency=2,
        )
        options = EngineOptions(endpoint_api_key=KEY, judge_api_key=JUDGE_KEY)
        summary, recorder, _ = run(job, tmp_path, engine_options=options)
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", 2)
    for trial in (0, 1):
        mine = [m["type"] for m in recorder.messages if m.get("trial") == trial]
        assert mine.index("evaluation") > max(i for i, t in enumerate(mine) if t == "measurement")
        assert mine[-1] == "trial_finished"
    reports = recorder.of("evaluation")
    assert [r["trial"] for r in reports] == [0, 1]
    report = reports[0]
    # 9 right, 3 wrong, 2 judged 3 of 4: the mean over 14 scored items, Wilson's interval.
    scores = [1.0] * 9 + [0.0] * 3 + [0.75] * 2
    expected = score_interval(scores)
    summary_ = report["summary"]
    assert (summary_["items"], summary_["scored"], summary_["failed"]) == (14, 14, 0)
    assert summary_["score"] == pytest.approx(expected.value)
    assert (summary_["low"], summary_["high"]) == pytest.approx((expected.low, expected.high))
    by_id = {item["id"]: item for item in report["items"]}
    assert by_id["r4"]["output"] == "4" and by_id["r4"]["score"] == 1.0
    assert by_id["w2"]["output"] == "2" and by_id["w2"]["score"] == 0.0
    assert by_id["r4"]["output_sha256"] == protocol.evaluation_digest("4")
    assert by_id["j1"]["score"] == 0.75 and by_id["j1"]["latency_s"] >= 0
    # Greedy and seeded, at most 2 in flight, the judge asked with its own key.
    assert judge.peak_in_flight <= 2 and len(judge.requests) == 4
    assert all(r["temperature"] == 0.0 and r["seed"] == 0 for r in judge.requests)
    text = json.dumps(recorder.messages)
    assert KEY not in text and JUDGE_KEY not in text
    for seq, message in enumerate(recorder.messages):
        protocol.parse_agent_message({**message, "seq": seq})


@pytest.mark.slow
def test_a_simulated_trial_sends_no_evaluation(tmp_path):
    job = with_evaluation(make_job([{"max_num_seqs": 8}]), pack="arithmetic")
    summary, recorder, _ = run(job, tmp_path)
    assert summary.trials_succeeded == 1
    assert recorder.of("evaluation") == []


def test_a_large_set_goes_in_parts_each_with_the_summary():
    outcomes = tuple(
        ItemOutcome(f"q{i}", "x" * 5_000 if i == 0 else "ok", 1.0 if i % 2 else 0.0, 0.01)
        for i in range(protocol.MAX_EVALUATION_PART_ITEMS * 2 + 1)
    )
    outcome = EvaluationOutcome(outcomes, score_interval([o.score for o in outcomes]))
    parts = evaluation_parts(outcome, seconds=2.5)
    assert [(p["part"], p["parts"], len(p["items"])) for p in parts] == [
        (0, 3, 250),
        (1, 3, 250),
        (2, 3, 1),
    ]
    assert all(p["summary"] == parts[0]["summary"] for p in parts)
    first = parts[0]["items"][0]
    assert len(first.output) == protocol.MAX_EVALUATION_OUTPUT_CHARS
    assert first.output_sha256 == protocol.evaluation_digest("x" * 5_000)
    assert parts[0]["summary"].items == 501 and parts[0]["summary"].seconds == 2.5


async def test_an_unreadable_set_or_an_unanswering_server_sends_what_it_can(tmp_path):
    job = with_evaluation(endpoint_job("http://127.0.0.1:9"), set_jsonl="not json\n")
    assert (
        await trial_evaluation(
            job, base_url="http://127.0.0.1:9", keys=EvaluationKeys(), timeout_s=5
        )
        == []
    )
    job = with_evaluation(endpoint_job("http://127.0.0.1:9"), set_jsonl=say_set(2, 0))
    (part,) = await trial_evaluation(
        job, base_url="http://127.0.0.1:9", keys=EvaluationKeys(), timeout_s=5
    )
    # Nothing answered: every item scores 0 and says why.
    assert part["summary"].failed == 2 and part["summary"].score == 0.0
    assert all(item.error == "transport" and item.output is None for item in part["items"])
