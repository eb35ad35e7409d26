"""The quality floor beyond the run's answer (issue 38, docs/quality.md): the model-choice
report ranks only configurations that keep their run's floor and lists the others with the
reason, promotions refuse what the answer excluded, and the models report charts quality
against cost from the stored scores; simulated runs are never given a score."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.urls import reverse

from agents.evaluation.packs import pack_bytes
from agents.hardware import MODEL_PRESETS
from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import AuditEvent, Membership, Promotion, TrialEvaluation
from runs.selectors.model_choice import model_choice
from runs.selectors.models_report import models_report
from runs.selectors.run_answer import run_answer
from runs.selectors.trial_quality import SIMULATED_NOTE
from runs.services.evaluations import evaluation_set_upload
from runs.services.promotions import promotion_approve, promotion_propose

from .conftest import SYSTEM, make_experiment, make_model, signed_in
from .report_data import add_trial, level
from .test_trial_evaluations import (
    REFERENCE,
    floored_run,
    ingest,
    priced_run,
    priced_trial,
    report,
    scored_pair,
    simulated_floored_run,
)

pytestmark = pytest.mark.django_db

BELOW = "score 60.0 % is below the floor of 70.0 %"
# Items 0-8 answered right (90 %): the pack's items, as the scored pair's.
NINE_OF_TEN = [
    (item, output, 1.0 if n < 9 else 0.0) for n, (item, output, _) in enumerate(REFERENCE)
]


def api(person, name, **kwargs):
    kwargs["org"] = person.org.slug
    response = person.client().get(reverse(name, kwargs=kwargs))
    assert response.status_code == 200, response.content[:500]
    return response.json()


def choice_api(person, experiment):
    return api(person, "experiment-choice", pk=experiment.id)


# --- The model choice ------------------------------------------------------------------------


def test_without_a_floor_the_model_choice_recommends_the_cheapest(charlie):
    run = floored_run(charlie.org)
    scored_pair(run)
    choice = model_choice(experiment=run.experiment)
    assert [f.trial_index for f in choice.measured] == [1, 0]
    assert choice.excluded_for_quality == []
    assert choice_api(charlie, run.experiment)["excluded_for_quality"] == []


def test_a_floor_changes_the_model_choices_ranking_and_says_why(alice):
    run = floored_run(alice.org, {"min_score": 0.7})
    scored_pair(run)  # trial 1 is the cheaper, at 60 %
    choice = model_choice(experiment=run.experiment)
    assert [f.trial_index for f in choice.measured] == [0]
    assert choice.recommended.trial_index == 0
    assert [f.trial_index for f in choice.excluded_for_quality] == [1]
    assert choice.per_model[0].trial_index == 0  # a model's best keeps the floor too

    data = choice_api(alice, run.experiment)
    assert data["recommended"]["trial"] == 0
    assert data["recommended"]["quality"]["quality_floor"] == "meets the quality floor"
    assert data["recommended"]["quality"]["score"] == pytest.approx(0.8)
    assert [r["trial"] for r in data["ranked"]] == [0]
    assert data["excluded_for_quality"] == [
        {
            "run": str(run.id),
            "trial": 1,
            "experiment": str(run.experiment.id),
            "model": run.experiment.model.name,
            "image_tag": "",
            "reason": BELOW,
        }
    ]

    page = signed_in(alice).get(reverse("report-choice", args=[alice.org.slug, run.experiment.id]))
    text = page.content.decode()
    assert f"trial 1 ({'max_num_seqs=128'}) — {BELOW}." in text
    assert "Excluded for quality:" in text and "meets the quality floor" in text


def test_the_model_choice_excludes_exactly_what_the_runs_answer_excludes(alice):
    run = floored_run(alice.org, {"max_points_below_best": 10})
    scored_pair(run)
    answer = run_answer(run=run)
    choice = model_choice(experiment=run.experiment)
    reasons = {
        f.trial_index: choice.quality_of(f).standing.reason for f in choice.excluded_for_quality
    }
    assert reasons == {x["trial"]: x["reason"] for x in answer.excluded_for_quality}
    assert reasons[1].startswith("score 60.0 % is 20.0 points below the best, trial 0")


def test_an_unscored_configuration_stays_ranked_and_says_so(alice):
    run = floored_run(alice.org, {"min_score": 0.7})
    scored_pair(run)
    priced_trial(run, 2, 4000.0)  # the cheapest, never scored
    choice = model_choice(experiment=run.experiment)
    assert [f.trial_index for f in choice.measured] == [2, 0]
    assert [f.trial_index for f in choice.quality_not_judged] == [2]
    data = choice_api(alice, run.experiment)
    assert data["quality_not_judged"][0]["reason"] == "quality not judged: not scored yet"
    assert data["recommended"]["quality"]["score"] is None
    page = signed_in(alice).get(reverse("report-choice", args=[alice.org.slug, run.experiment.id]))
    assert "Ranked without a score:" in page.content.decode()


def test_another_tenant_cannot_read_the_model_choice(alice, charlie):
    run = floored_run(alice.org, {"min_score": 0.7})
    url = reverse("experiment-choice", kwargs={"org": charlie.org.slug, "pk": run.experiment.id})
    assert charlie.client().get(url).status_code == 404


# --- Promotions --------------------------------------------------------------------------------


def _member(person) -> Membership:
    return Membership.objects.get(user=person.user, organization=person.org)


def _actor(person) -> Actor:
    return Actor(user=person.user, via="web", ip="127.0.0.1")


def test_a_configuration_excluded_for_quality_cannot_be_proposed(alice, mallory):
    run = floored_run(alice.org, {"min_score": 0.7})
    scored_pair(run)
    excluded = run.trials.get(index=1)
    audited = AuditEvent.objects.filter(organization=alice.org).count()
    with pytest.raises(DomainValidationError) as refused:
        promotion_propose(membership=_member(mallory), actor=_actor(mallory), trial=excluded)
    assert list(refused.value.fields) == ["trial"]
    message = refused.value.fields["trial"][0]
    assert BELOW in message and "a score of at least 70.0 %" in message
    assert not Promotion.objects.exists()
    assert AuditEvent.objects.filter(organization=alice.org).count() == audited

    page = signed_in(mallory).post(
        reverse("promotion-propose", args=[alice.org.slug, run.id, 1]), {"trial": "1"}
    )
    assert page.status_code == 400 and BELOW in page.content.decode()
    assert not Promotion.objects.exists()
    # The configuration that keeps the floor is proposed as before.
    kept = promotion_propose(
        membership=_member(mallory), actor=_actor(mallory), trial=run.trials.get(index=0)
    )
    assert kept.trial.index == 0


def test_a_proposal_excluded_for_quality_since_cannot_be_approved(alice, mallory):
    run = floored_run(alice.org, {"max_points_below_best": 5})
    priced_trial(run, 0, 1000.0)
    priced_trial(run, 1, 2000.0)
    ingest(run, report(run, 0, 1, REFERENCE))  # 80 %, the only score so far: the best
    proposal = promotion_propose(
        membership=_member(mallory), actor=_actor(mallory), trial=run.trials.get(index=1)
    )
    # Trial 0 is scored after the proposal: 10 points better, it moves the floor's best.
    ingest(run, report(run, 1, 0, NINE_OF_TEN))
    with pytest.raises(DomainValidationError) as refused:
        promotion_approve(
            membership=_member(alice), actor=_actor(alice), promotion=proposal, comment="ok"
        )
    assert "points below the best" in refused.value.fields["trial"][0]
    proposal.refresh_from_db()
    assert proposal.state == "proposed"


# --- The models report: quality against cost -------------------------------------------------


def _two_models(org):
    """Llama (trials 0 and 1 of the scored pair, floor 70 %) and Qwen (one trial at
    $0.25 per 1M, scored 90 %, floor 50 %), both on the arithmetic pack."""
    llama = floored_run(org, {"min_score": 0.7})
    scored_pair(llama)
    qwen_model = make_model(org, **MODEL_PRESETS["qwen2.5-7b"].registered)
    qwen = floored_run(org, {"min_score": 0.5}, qwen_model)
    priced_trial(qwen, 0, 4000.0)
    ingest(qwen, report(qwen, 0, 0, NINE_OF_TEN))
    return llama, qwen


def test_the_models_report_charts_quality_against_cost_from_the_stored_scores(alice):
    llama, qwen = _two_models(alice.org)
    data = api(alice, "reports-models")
    points = data["quality_against_cost"]["measured"]
    by_model = {p["model"]: p for p in points}
    assert set(by_model) == {llama.experiment.model.name, qwen.experiment.model.name}
    llama_point = by_model[llama.experiment.model.name]
    qwen_point = by_model[qwen.experiment.model.name]
    # Llama's cheapest that keeps its floor is trial 0 (trial 1 is excluded at 60 %).
    assert (llama_point["trial"], llama_point["quality"]["score"]) == (0, pytest.approx(0.8))
    assert llama_point["usd_per_million_at_capacity"] == "1.0000"
    assert qwen_point["quality"]["score"] == pytest.approx(0.9)
    assert qwen_point["quality"]["evaluation"] == "pack arithmetic"
    assert [x["trial"] for x in data["excluded_for_quality"]] == [1]
    assert data["excluded_for_quality"][0]["reason"] == BELOW

    # The figures are the stored rows': change one, and the chart follows.
    stored = TrialEvaluation.objects.get(trial__run=qwen, trial__index=0)
    stored.score, stored.score_low, stored.score_high = 0.75, 0.6, 0.85
    stored.save()
    qwen_point = next(
        p
        for p in api(alice, "reports-models")["quality_against_cost"]["measured"]
        if p["run"] == str(qwen.id)
    )
    assert qwen_point["quality"]["score"] == 0.75
    assert qwen_point["quality"]["score_ci95"] == [0.6, 0.85]

    page = signed_in(alice).get(reverse("report-models", args=[alice.org.slug]))
    html = page.content.decode()
    embedded = html.split('id="quality-chart-data" type="application/json">')[1]
    chart = json.loads(embedded.split("<")[0])
    assert {(p["score_pct"], p["usd_per_million"]) for p in chart} == {
        ("80.0", "1.0000"),
        ("75.0", "0.2500"),
    }
    assert f"Excluded for quality: {llama.experiment.model.name}" in html and BELOW in html


def test_a_simulated_run_is_never_given_a_score(alice):
    simulated_floored_run(alice.org)
    found = models_report(org=alice.org)
    assert found.quality_measured == []
    (point,) = found.quality_simulated
    assert point.quality.score is None and point.quality.note == SIMULATED_NOTE
    data = api(alice, "reports-models")
    (simulated,) = data["quality_against_cost"]["simulated"]
    assert simulated["quality"]["score"] is None
    assert simulated["quality"]["note"] == SIMULATED_NOTE
    web = signed_in(alice)
    page = web.get(reverse("report-models", args=[alice.org.slug]))
    assert 'id="quality-chart-data"' not in page.content.decode()
    exported = web.get(
        reverse("report-models", args=[alice.org.slug]), {"csv": "quality-simulated"}
    )
    header, row = csv.reader(io.StringIO(exported.content.decode()))
    shown = dict(zip(header, row, strict=True))
    assert (shown["Source"], shown["Score %"], shown["Quality"]) == (
        "simulated",
        "",
        SIMULATED_NOTE,
    )


def test_another_tenant_sees_none_of_the_models_quality(alice, charlie):
    _two_models(alice.org)
    data = api(charlie, "reports-models")
    assert data["quality_against_cost"] == {"measured": [], "simulated": []}
    assert data["measured"] == [] and data["excluded_for_quality"] == []


def test_a_viewer_reads_the_reports_api(alice, bob):
    _two_models(alice.org)
    assert api(bob, "reports-models")["quality_against_cost"]["measured"]


def test_a_trial_is_only_judged_by_its_own_runs_floor(alice):
    """A run without a floor keeps all its configurations, whatever another run's floor."""
    llama, _ = _two_models(alice.org)
    open_run = priced_run(alice.org, llama.experiment)
    open_run.experiment_snapshot["quality_floor"] = None
    open_run.save(update_fields=["experiment_snapshot"])
    priced_trial(open_run, 0, 1500.0)
    ingest(open_run, report(open_run, 0, 0, [(i, o, 0.0) for i, o, _ in REFERENCE]))
    choice = model_choice(experiment=llama.experiment)
    (ranked,) = [f for f in choice.measured if f.run_id == open_run.id]  # at 0 %, yet ranked
    assert choice.quality_of(ranked).score == 0.0
    assert choice.quality_of(ranked).standing is None
    assert [f.run_id for f in choice.excluded_for_quality] == [llama.id]


# --- A floor below the best model ------------------------------------------------------------

MODEL_FLOOR = {"max_points_below_best_model": 5}


def _small(org, floor=None):
    """Llama: one trial at $0.25 per 1M scoring 80 % on the arithmetic pack, under
    ``floor`` (default: 5 points below the best model)."""
    small = floored_run(org, floor or MODEL_FLOOR)
    priced_trial(small, 0, 4000.0)
    ingest(small, report(small, 0, 0, REFERENCE))
    return small


def _small_and_big(org, small_floor=None):
    """``_small`` and Qwen (one trial at $1 per 1M scoring 90 %, no floor), both on the
    arithmetic pack, for the same workload and SLOs."""
    small = _small(org, small_floor)
    big = floored_run(org, None, make_model(org, **MODEL_PRESETS["qwen2.5-7b"].registered))
    priced_trial(big, 0, 1000.0)
    ingest(big, report(big, 0, 0, NINE_OF_TEN))
    return small, big


def _model_reason(big) -> str:
    model = big.experiment.model.name
    return f"score 80.0 % is more than 5 points below the best model's 90.0 % ({model})"


def test_a_floor_below_the_best_model_excludes_the_smaller_model(alice):
    # Held to its own run's best configuration, the smaller model's only trial keeps it.
    small, big = _small_and_big(alice.org, {"max_points_below_best": 5})
    choice = model_choice(experiment=small.experiment)
    assert [f.run_id for f in choice.measured] == [small.id, big.id]
    assert choice.excluded_for_quality == []

    small.experiment_snapshot["quality_floor"] = MODEL_FLOOR
    small.save(update_fields=["experiment_snapshot"])
    choice = model_choice(experiment=small.experiment)
    assert [f.run_id for f in choice.measured] == [big.id]
    assert [f.run_id for f in choice.excluded_for_quality] == [small.id]
    (excluded,) = choice.excluded_for_quality
    assert choice.quality_of(excluded).standing.reason == _model_reason(big)
    data = choice_api(alice, small.experiment)
    assert data["recommended"]["run"] == str(big.id)
    assert data["excluded_for_quality"][0]["reason"] == _model_reason(big)

    report_data = api(alice, "reports-models")
    assert [(x["run"], x["reason"]) for x in report_data["excluded_for_quality"]] == [
        (str(small.id), _model_reason(big))
    ]


def test_the_runs_answer_and_promotions_hold_the_floor_below_the_best_model(alice, mallory):
    small, big = _small_and_big(alice.org)
    answer = run_answer(run=small)
    assert answer.winner is None
    assert answer.excluded_for_quality == [
        {"trial": 0, "image_tag": "", "reason": _model_reason(big)}
    ]
    assert answer.quality_floor_text == (
        "at most 5 points below the best model's score on the same evaluation"
    )
    with pytest.raises(DomainValidationError) as refused:
        promotion_propose(
            membership=_member(mallory), actor=_actor(mallory), trial=small.trials.get(index=0)
        )
    assert _model_reason(big) in refused.value.fields["trial"][0]
    # Within the allowance, it keeps the floor: 80 % is 10 points below the best.
    small.experiment_snapshot["quality_floor"] = {"max_points_below_best_model": 10}
    small.save(update_fields=["experiment_snapshot"])
    answer = run_answer(run=small)
    assert answer.winner.trial == 0 and answer.excluded_for_quality == []
    assert answer.winner.quality_floor == "meets the quality floor"


def test_scores_on_another_evaluation_are_never_the_best_models(alice):
    small, big = _small_and_big(alice.org)
    uploaded = evaluation_set_upload(
        org=alice.org, actor=SYSTEM, name="maths", raw=pack_bytes("arithmetic")
    )
    # The same items, uploaded as a set: another evaluation (named by its digest).
    big.job_spec["evaluation"] = {"set_id": str(uploaded.id), "set_sha256": uploaded.sha256}
    big.save(update_fields=["job_spec"])
    assert run_answer(run=small).excluded_for_quality == []
    choice = model_choice(experiment=small.experiment)
    assert [f.run_id for f in choice.measured] == [small.id, big.id]
    assert choice.quality_of(choice.measured[0]).floor_text == "meets the quality floor"


def test_another_experiments_workload_or_tenants_scores_are_never_the_best_models(alice, charlie):
    small, big = _small_and_big(alice.org)
    big.experiment.workload = big.experiment.workload | {"requests_per_level": 50}
    big.experiment.save(update_fields=["workload"])
    assert run_answer(run=small).excluded_for_quality == []
    _, theirs = _small_and_big(charlie.org, {"min_score": 0.1})  # 90 % in charlie's org
    assert theirs.organization == charlie.org
    assert run_answer(run=small).excluded_for_quality == []
    assert model_choice(experiment=small.experiment).excluded_for_quality == []


def test_simulated_scores_never_count_toward_the_best_model(alice):
    small = _small(alice.org)
    experiment = make_experiment(
        alice.org,
        small.experiment.model,
        name="simulated",
        engine="sim",
        engine_image_tag="",
        evaluation={"pack": "arithmetic", "quality_floor": MODEL_FLOOR},
    )
    simulated = priced_run(alice.org, experiment)
    priced_trial(simulated, 0, 8000.0)
    # Whatever was stored for it, a simulated trial's score is not a measurement.
    TrialEvaluation.objects.create(
        organization=alice.org,
        trial=simulated.trials.get(index=0),
        score=1.0,
        score_low=0.7,
        score_high=1.0,
        items=10,
        scored=10,
    )
    # Nor one whose levels carry the simulator's label, on a real engine's run.
    labelled = priced_run(alice.org, small.experiment)
    add_trial(labelled, 0, {}, [level(20, 8000.0, 300, simulated=1.0)])
    ingest(labelled, report(labelled, 0, 0, NINE_OF_TEN))
    assert run_answer(run=small).excluded_for_quality == []
    choice = model_choice(experiment=small.experiment)
    assert [f.run_id for f in choice.measured] == [small.id]
    assert choice.excluded_for_quality == []
    # Nor is it ever excluded: its quality is not judged.
    answer = run_answer(run=simulated)
    assert answer.excluded_for_quality == [] and answer.winner.quality_floor == SIMULATED_NOTE
