"""A trial's evaluation on the site (issue 38): stored from the agent's ``evaluation``
messages once per item however often they come, in parts, with the score's interval; drift
from the reference configuration; shown beside the cost; a simulated run says it cannot judge
quality."""

from __future__ import annotations

import math
from decimal import Decimal

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
from .report_data import add_trial, level

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
    return protocol.parse_agent_message(
        {
            "type": "evaluation",
            "run_id": str(run.id),
            "seq": seq,
            "trial": trial,
            "part": part,
            "parts": parts,
            "items": [
                {
                    "id": item_id,
                    "score": score,
                    "output": output,
                    "output_sha256": protocol.evaluation_digest(output),
                    "latency_s": 0.1,
                }
                for item_id, output, score in items
            ],
            "summary": {
                "score": interval.value,
                "low": interval.low,
                "high": interval.high,
                "items": ITEMS,
                "scored": ITEMS,
                "seconds": 4.0,
            },
        }
    )


# Trial 0 answers items 0-7 right; trial 1 answers items 0 and 1 otherwise, and wrong.
REFERENCE = [(f"q{i}", f"a{i}", 1.0 if i < 8 else 0.0) for i in range(ITEMS)]
CANDIDATE = [
    (f"q{i}", "x" if i < 2 else f"a{i}", 0.0 if i < 2 else s)
    for i, (_, _, s) in enumerate(REFERENCE)
]


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
        "score": 1.0,
        "output": "a3",
        "output_sha256": protocol.evaluation_digest("a3"),
        "latency_s": 0.1,
    }
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


def floored_run(org, floor=None, model=None) -> Run:
    """A run scored on the pack (under ``floor``, if any), its trials priced at $3.60/h: a
    trial at ``throughput`` output tokens/s costs 1,000 / throughput USD per 1M."""
    evaluation = {"pack": "arithmetic"} | ({"quality_floor": floor} if floor else {})
    name = "floor-" + "-".join(f"{k}-{v}" for k, v in (floor or {}).items())
    experiment = make_experiment(org, model, name=name, evaluation=evaluation)
    return priced_run(org, experiment)


def priced_run(org, experiment) -> Run:
    return Run.objects.create(
        organization=org, experiment=experiment, price_usd_hr=Decimal("3.60"), **frozen(experiment)
    )


def priced_trial(run, index, throughput):
    trial = add_trial(run, index, {"max_num_seqs": 64 * (index + 1)}, [level(20, throughput, 300)])
    trial.capacity = {
        "axis": "concurrency",
        "capacity": 20,
        "bracket_low": 20,
        "bracket_high": 21,
        "probes": 3,
        "stop_reason": "converged",
        "output_throughput": throughput,
    }
    trial.save(update_fields=["capacity"])


def scored_pair(run):
    """Trial 0 costs $1 per 1M and scores 80 %; trial 1 costs $0.50 and scores 60 %."""
    priced_trial(run, 0, 1000.0)
    priced_trial(run, 1, 2000.0)
    ingest(run, report(run, 0, 0, REFERENCE), report(run, 1, 1, CANDIDATE))


def test_without_a_floor_the_cheapest_wins_whatever_it_scores(alice):
    run = floored_run(alice.org)
    scored_pair(run)
    answer = run_answer(run=run)
    assert answer.winner.trial == 1 and answer.quality_floor is None
    assert answer.excluded_for_quality == [] and answer.winner.quality_floor == ""


def test_a_floor_that_excludes_the_cheapest_changes_the_winner(alice):
    run = floored_run(alice.org, {"min_score": 0.7})
    scored_pair(run)
    answer = run_answer(run=run)
    assert answer.winner.trial == 0 and answer.runner_up is None
    assert answer.winner.quality_floor == "meets the quality floor"
    reason = "score 60.0 % is below the floor of 70.0 %"
    assert answer.excluded_for_quality == [{"trial": 1, "image_tag": "", "reason": reason}]
    assert [c.trial for c in answer.configs] == [0, 1]  # the excluded one is still listed
    api = answer.as_json()
    assert api["excluded_for_quality"][0]["reason"] == reason
    assert api["quality_floor"] == {"min_score": 0.7}
    page = signed_in(alice).get(reverse("run-detail", args=[alice.org.slug, run.id]))
    text = page.content.decode()
    assert "Quality floor" in text and "a score of at least 70.0 %" in text
    assert "Excluded for quality: trial 1" in text and reason in text


def test_a_relative_floor_counts_points_below_the_best(alice):
    narrow = floored_run(alice.org, {"max_points_below_best": 10})
    scored_pair(narrow)
    answer = run_answer(run=narrow)
    assert answer.winner.trial == 0
    assert answer.excluded_for_quality[0]["reason"] == (
        "score 60.0 % is 20.0 points below the best, trial 0 at 80.0 % (the floor allows 10)"
    )
    wide = floored_run(
        alice.org, {"max_points_below_best": 20}, narrow.experiment.model
    )  # exactly at the floor
    scored_pair(wide)
    answer = run_answer(run=wide)
    assert answer.winner.trial == 1 and answer.excluded_for_quality == []


def test_unjudged_configurations_stay_in_and_say_so(alice):
    run = floored_run(alice.org, {"min_score": 0.7})
    scored_pair(run)
    priced_trial(run, 2, 4000.0)  # the cheapest, never scored
    answer = run_answer(run=run)
    assert answer.winner.trial == 2 and answer.runner_up.trial == 0
    assert answer.winner.quality_floor == "quality not judged: not scored yet"
    assert answer.quality_not_judged == [
        {"trial": 2, "image_tag": "", "reason": "quality not judged: not scored yet"}
    ]
    assert [x["trial"] for x in answer.excluded_for_quality] == [1]
    page = signed_in(alice).get(reverse("run-detail", args=[alice.org.slug, run.id]))
    assert "Trial 2: quality not judged: not scored yet." in page.content.decode()


def simulated_floored_run(org) -> Run:
    """A simulated run under a floor of 90 %, its one trial priced at $1 per 1M."""
    experiment = make_experiment(
        org,
        engine="sim",
        engine_image_tag="",
        evaluation={"pack": "arithmetic", "quality_floor": {"min_score": 0.9}},
    )
    run = priced_run(org, experiment)
    priced_trial(run, 0, 1000.0)
    return run


def test_a_simulated_run_under_a_floor_cannot_judge_quality(alice):
    run = simulated_floored_run(alice.org)
    answer = run_answer(run=run)
    assert answer.winner.trial == 0 and answer.excluded_for_quality == []
    assert answer.winner.quality_floor == SIMULATED_NOTE
