"""A trial's evaluation in the runner (issue 38): after its load levels, against the same
server, reported per item with the score and its interval; a judge through a second stand-in;
nothing on the simulator; keys never in a message; an uploaded set of any size fetched from
the site by route, used only when its sha256 is the job's."""

from __future__ import annotations

import hashlib
import json
import logging

import pytest

from agents import protocol
from agents.evaluation import score_interval
from agents.evaluation.client import EvaluationOutcome, ItemOutcome
from agents.runner.evaluation_run import EvaluationKeys, evaluation_parts, trial_evaluation
from agents.runner.session import evaluation_set_fetcher
from agents.runner.trial_engine import EngineOptions
from runs.demo.stand_in import StandInServer
from tests.agents.fake_openai_server import FakeServer
from tests.agents.fake_site import FakeSite

from .test_endpoint_engine import endpoint_job
from .test_runner import make_job, run

KEY, JUDGE_KEY = "sk-served-secret-77", "sk-judge-secret-88"


def say_set(right: int, wrong: int, judged: int = 0, *, pad: int = 0) -> str:
    """Items "Say N" whose reference is N (the stand-in echoes the last word: right) or
    N + 1 (wrong), and judge items the judge scores; ``pad`` words before each prompt's
    last (a larger file, the same answers)."""
    words = "word " * pad
    lines = [json.dumps({"set": {"scorer": {"kind": "exact"}, "max_tokens": 4}})]
    lines += [
        json.dumps({"id": f"r{i}", "prompt": f"{words}Say {i}", "reference": str(i)})
        for i in range(right)
    ]
    lines += [
        json.dumps({"id": f"w{i}", "prompt": f"{words}Say {i}", "reference": str(i + 1)})
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
    with StandInServer(lambda prompt: "Fine. SCORE: 3") as judge:
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


RUN_TOKEN = "bsr_evaluation-run-token"
# 60 items of about 1,250 bytes: a file larger than any job may carry whole.
LARGE = say_set(right=45, wrong=15, pad=240).encode()


@pytest.fixture
def site():
    running = FakeSite(run_id="00000000-0000-4000-8000-000000000038", token=RUN_TOKEN).start()
    running.files["set-large"] = LARGE
    yield running
    running.close()


def fetched_job(base_url: str, sha256: str) -> protocol.JobSpec:
    return with_evaluation(
        endpoint_job(base_url), set_id="set-large", set_sha256=sha256, concurrency=4
    )


@pytest.mark.slow
def test_a_set_over_64_kib_is_fetched_from_the_site_once_and_scored(server, site, tmp_path):
    assert len(LARGE) > protocol.MAX_JOB_EVALUATION_BYTES
    job = with_evaluation(
        endpoint_job(server.base_url, trials=({}, {})),
        set_id="set-large",
        set_sha256=hashlib.sha256(LARGE).hexdigest(),
        concurrency=4,
    )
    assert job.evaluation.set_jsonl is None and "Say 4" not in job.model_dump_json()
    fetch = evaluation_set_fetcher(site.endpoints(), tmp_path)
    summary, recorder, _ = run(
        job, tmp_path, engine_options=EngineOptions(endpoint_api_key=KEY), evaluation_set=fetch
    )
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", 2)
    reports = recorder.of("evaluation")
    assert [r["trial"] for r in reports] == [0, 1]
    expected = score_interval([1.0] * 45 + [0.0] * 15)
    found = reports[0]["summary"]
    assert (found["items"], found["scored"], found["failed"]) == (60, 60, 0)
    assert found["score"] == pytest.approx(expected.value) == pytest.approx(0.75)
    assert (found["low"], found["high"]) == pytest.approx((expected.low, expected.high))
    # Downloaded for the first trial, kept for the second.
    assert site.downloads == 1
    assert (tmp_path / "evaluation-sets" / "set-large.jsonl").read_bytes() == LARGE


async def test_a_set_whose_sha256_is_not_the_jobs_is_refused_and_not_kept(
    server, site, tmp_path, caplog
):
    fetch = evaluation_set_fetcher(site.endpoints(), tmp_path)
    job = fetched_job(server.base_url, "0" * 64)
    with caplog.at_level(logging.ERROR, logger="agents.runner.evaluation_run"):
        parts = await trial_evaluation(
            job,
            base_url=server.base_url,
            keys=EvaluationKeys(served=KEY),
            timeout_s=30,
            fetch_set=fetch,
        )
    assert parts == [] and site.downloads == 1
    assert f"the job names {'0' * 64}" in caplog.text
    assert not (tmp_path / "evaluation-sets" / "set-large.jsonl").exists()
    # The right digest then scores it: nothing wrong was kept in between.
    right = fetched_job(server.base_url, hashlib.sha256(LARGE).hexdigest())
    (part, *_) = await trial_evaluation(
        right,
        base_url=server.base_url,
        keys=EvaluationKeys(served=KEY),
        timeout_s=30,
        fetch_set=fetch,
    )
    assert part["summary"].items == 60


async def test_a_set_the_site_does_not_serve_sends_nothing(server, site, tmp_path, caplog):
    sha256 = hashlib.sha256(LARGE).hexdigest()
    refused_token = evaluation_set_fetcher(site.endpoints(token="bsr_not-this-run"), tmp_path)
    no_site = evaluation_set_fetcher(None, tmp_path)
    job = fetched_job(server.base_url, sha256)
    with caplog.at_level(logging.ERROR, logger="agents.runner.evaluation_run"):
        for fetch in (refused_token, no_site, None):
            assert (
                await trial_evaluation(
                    job,
                    base_url=server.base_url,
                    keys=EvaluationKeys(served=KEY),
                    timeout_s=30,
                    fetch_set=fetch,
                )
                == []
            )
    assert "the site answered 401" in caplog.text and "no site" in caplog.text
    assert RUN_TOKEN not in caplog.text and site.downloads == 0


def test_a_job_names_a_fetched_set_by_its_digest_and_one_source_only():
    with pytest.raises(ValueError, match="needs its set_sha256"):
        protocol.EvaluationJob(set_id="set-large")
    with pytest.raises(ValueError, match="one of them"):
        protocol.EvaluationJob(set_id="s", set_sha256="0" * 64, pack="arithmetic")
    with pytest.raises(ValueError, match="set_id"):
        protocol.EvaluationJob(set_id="../other", set_sha256="0" * 64)
    assert protocol.EvaluationJob(set_id="s", set_sha256="0" * 64).fetched
    assert not protocol.EvaluationJob(set_jsonl="{}", set_id="s").fetched


@pytest.mark.slow
def test_the_served_endpoint_and_the_judge_are_reached_at_the_checked_addresses(server, tmp_path):
    """Names that resolve nowhere (``.invalid``): the evaluation reaches the endpoint and the
    judge only at the addresses the site checked, as the load does."""
    with StandInServer(lambda prompt: "Fine. SCORE: 4") as judge:
        judge_port = judge.url.rsplit(":", 1)[1]
        judge_spec = protocol.EvaluationJudge(
            base_url=f"http://judge.invalid:{judge_port}", model="judge", endpoint_id="j"
        )
        job = with_evaluation(
            endpoint_job(f"http://llm.endpoint.invalid:{server.port}"),
            set_jsonl=say_set(right=3, wrong=1, judged=1),
            judge=judge_spec,
        )
        options = EngineOptions(
            endpoint_api_key=KEY,
            endpoint_addresses=("127.0.0.2", "127.0.0.1"),
            judge_api_key=JUDGE_KEY,
            judge_addresses=("127.0.0.1",),
        )
        summary, recorder, _ = run(job, tmp_path, engine_options=options)
    assert summary.trials_succeeded == 1
    (report,) = recorder.of("evaluation")
    assert (report["summary"]["items"], report["summary"]["failed"]) == (5, 0)
    assert report["summary"]["score"] == pytest.approx(4 / 5)
    assert set(judge.hosts) == {f"judge.invalid:{judge_port}"}


def test_the_judges_checked_addresses_come_from_the_environment():
    variable = protocol.JUDGE_ADDRESSES_ENV
    options = EngineOptions.from_environment({variable: "192.0.2.8, 2001:db8::2"})
    assert options.judge_addresses == ("192.0.2.8", "2001:db8::2")
    assert EngineOptions.from_environment({}).judge_addresses == ()
    with pytest.raises(ValueError, match=variable):
        EngineOptions.from_environment({variable: "judge.example.com"})
