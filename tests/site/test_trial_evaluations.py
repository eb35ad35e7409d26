"""A trial's evaluation on the site (issue 38): stored from the agent's ``evaluation``
messages once per item however often they come, in parts, with the score's interval; drift
from the reference configuration; shown beside the cost; a simulated run says it cannot judge
quality."""

from __future__ import annotations

import math

import pytest
from django.urls import reverse
from scipy import stats

from agents import protocol
from agents.evaluation import score_interval
from runs.models import AgentMessageRecord, Run, Trial, TrialEvaluation
from runs.selectors.run_answer import run_answer
from runs.selectors.trial_quality import SIMULATED_NOTE, reference_trial, run_quality
from runs.services.ingest import agent_messages_ingest

from .conftest import frozen, make_experiment, signed_in

pytestmark = pytest.mark.django_db

ITEMS = 10


def evaluated_run(org, **overrides) -> Run:
    experiment = make_experiment(org, evaluation={"pack": "arithmetic"}, **overrides)
    return Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))


def report(run, seq, trial, items, *, part=0, parts=1, whole=None) -> protocol.EvaluationReport:
    """``items``: (id, output, score) for each item of this part; ``whole``: every part's
    items, whose summary each part carries (default: ``items``)."""
    scores = [score for _, _, score in whole or items]
    interval = score_interval(scores)
    return protocol.parse_agent_message({
        "type": "evaluation", "run_id": str(run.id), "seq": seq, "trial": trial,
        "part": part, "parts": parts,
        "items": [
            {"id": item_id, "score": score, "output": output,
             "output_sha256": protocol.evaluation_digest(output), "latency_s": 0.1}
            for item_id, output, score in items
        ],
        "summary": {"score": interval.value, "low": interval.low, "high": interval.high,
                    "items": ITEMS, "scored": ITEMS, "seconds": 4.0},
    })  # fmt: skip


# Trial 0 answers items 0-7 right; trial 1 answers items 0 and 1 otherwise, and wrong.
REFERENCE = [(f"q{i}", f"a{i}", 1.0 if i < 8 else 0.0) for i in range(ITEMS)]
CANDIDATE = [(f"q{i}", "x" if i < 2 else f"a{i}", 0.0 if i < 2 else s) for i, (_, _, s) in
             enumerate(REFERENCE)]  # fmt: skip


def ingest(run, *messages):
    return agent_messages_ingest(run_id=run.id, messages=list(messages))


def test_it_stores_each_items_outcome_once_whatever_is_resent(alice):
    run = evaluated_run(alice.org)
    first, second = REFERENCE[:6], REFERENCE[6:]
    outcomes = ingest(
        run,
        report(run, 0, 0, first, parts=2, whole=REFERENCE),
        report(run, 1, 0, second, part=1, parts=2, whole=REFERENCE),
    )
    assert [o.stored for o in outcomes] == [True, True]
    stored = TrialEvaluation.objects.get(trial__run=run, trial__index=0)
    expected = score_interval([s for _, _, s in REFERENCE])
    assert (stored.score, stored.score_low, stored.score_high) == pytest.approx(
        (expected.value, expected.low, expected.high)
    )
    assert (stored.items, stored.scored, stored.seconds) == (ITEMS, ITEMS, 4.0)
    assert stored.organization_id == alice.org.id
    assert stored.outcomes["q3"] == {
        "score": 1.0, "output": "a3", "output_sha256": protocol.evaluation_digest("a3"),
        "latency_s": 0.1,
    }  # fmt: skip
    # The same message again: acknowledged, nothing changes; a part sent again under a new
    # seq (a trial measured again): one outcome per item still.
    assert [o.stored for o in ingest(run, report(run, 1, 0, second, part=1, parts=2))] == [False]
    ingest(run, report(run, 2, 0, second, part=1, parts=2))
    stored.refresh_from_db()
    assert (
        len(stored.outcomes) == ITEMS
        and TrialEvaluation.objects.filter(trial__run=run).count() == 1
    )
    assert AgentMessageRecord.objects.filter(run=run, type="evaluation").count() == 3


def test_drift_from_the_reference_is_shown_beside_the_cost(alice):
    run = evaluated_run(alice.org)
    ingest(run, report(run, 0, 0, REFERENCE), report(run, 1, 1, CANDIDATE))
    quality = run_quality(run=run)
    assert quality[0].drift is None  # the reference: trial 0, full precision, first
    found = quality[1].drift
    assert (found["reference_trial"], found["compared"], found["changed"]) == (0, ITEMS, 2)
    # Scored difference: -1 on two items, 0 on eight; Student's t over the ten pairs.
    differences = [-1.0, -1.0] + [0.0] * 8
    mean = sum(differences) / ITEMS
    sd = math.sqrt(sum((d - mean) ** 2 for d in differences) / (ITEMS - 1))
    half = stats.t.ppf(0.975, ITEMS - 1) * sd / math.sqrt(ITEMS)
    assert found["score_difference"] == pytest.approx([mean, mean - half, mean + half])
    answer = run_answer(run=run)
    assert {c.trial: c.quality["score"] for c in answer.configs} == pytest.approx({0: 0.8, 1: 0.6})
    page = signed_in(alice).get(reverse("run-detail", args=[alice.org.slug, run.id]))
    text = page.content.decode()
    assert "Quality (95 % CI)" in text and "80.0 %" in text
    assert "2 of 10 (20.0 %" in text and "-20.0 pts" in text


def test_vllms_defaults_are_the_reference_else_the_first_full_precision_trial(alice):
    run = evaluated_run(alice.org)

    def trials(*configs):
        return [Trial(run=run, index=i, serve_config=c) for i, c in enumerate(configs)]

    quantized, bf16, defaults = {"quantization": "fp8"}, {"max_num_seqs": 8}, {}
    assert reference_trial(trials(quantized, bf16, defaults)).index == 2
    assert reference_trial(trials(quantized, bf16)).index == 1
    assert reference_trial(trials({"kv_cache_dtype": "fp8"}, quantized)) is None


def test_a_simulated_run_says_it_cannot_judge_quality(alice):
    run = evaluated_run(alice.org, engine="sim", engine_image_tag="")
    Trial.objects.create(run=run, index=0, organization=alice.org, serve_config={})
    assert run_quality(run=run)[0].note == SIMULATED_NOTE
    page = signed_in(alice).get(reverse("run-detail", args=[alice.org.slug, run.id]))
    assert SIMULATED_NOTE in page.content.decode()


def test_a_run_without_an_evaluation_shows_no_quality(alice):
    experiment = make_experiment(alice.org)
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    Trial.objects.create(run=run, index=0, organization=alice.org, serve_config={})
    assert run_quality(run=run) == {}
    assert run_answer(run=run).configs[0].quality is None
