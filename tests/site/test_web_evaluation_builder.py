"""The builder's evaluation inputs (issue 38): a set or a built-in pack, a judge endpoint,
the requests in flight and a quality floor, saved as the API stores them; refused by the
API's own rule with its message beside the input; an edit keeps, replaces or removes the
stored evaluation as the form shows it."""

from __future__ import annotations

import pytest
from django.urls import reverse

from frontend.experiments import builder
from frontend.experiments.form_slots import error_slot
from runs.models import Endpoint, Experiment
from runs.services.evaluations import evaluation_set_upload

from .conftest import SYSTEM, make_experiment, make_model, signed_in
from .db_state import database_state
from .test_evaluation_sets import JUDGED, check, refused_fields
from .test_web_experiments import assert_refused_beside, builder_form

pytestmark = pytest.mark.django_db

UNKNOWN = "00000000-0000-4000-8000-000000000001"


def judged_set(org):
    return evaluation_set_upload(org=org, actor=SYSTEM, name="judged", raw=JUDGED)


def judge_endpoint(org) -> Endpoint:
    return Endpoint.objects.create(
        organization=org,
        name="judge",
        base_url="https://judge.example",
        served_model_name="judge",
    )


def test_the_builder_saves_a_pack_with_a_floor_as_the_api_stores_it(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    page = client.get("/o/acme/experiments/new/").content.decode()
    assert 'value="pack:arithmetic"' in page and 'id="evaluation-fieldset"' in page
    form = builder_form(
        model,
        evaluation_source="pack:arithmetic",
        evaluation_concurrency="2",
        evaluation_floor_kind="min_score",
        evaluation_floor_value="0.9",
    )
    saved = client.post("/o/acme/experiments/new/", form)
    assert saved.status_code == 302, saved.content.decode()[:2000]
    experiment = Experiment.objects.get(organization=alice.org)
    assert experiment.evaluation == {
        "pack": "arithmetic",
        "concurrency": 2,
        "quality_floor": {"min_score": 0.9},
    }
    # Without evaluation inputs, none is stored.
    plain = client.post("/o/acme/experiments/new/", builder_form(model, name="plain"))
    assert plain.status_code == 302
    assert Experiment.objects.get(name="plain").evaluation == {}


def test_an_edit_keeps_replaces_or_removes_the_stored_evaluation(alice):
    uploaded, judge = judged_set(alice.org), judge_endpoint(alice.org)
    stored = {
        "set_id": str(uploaded.id),
        "judge_endpoint_id": str(judge.id),
        "concurrency": 3,
        "quality_floor": {"max_points_below_best": 2},
    }
    experiment = make_experiment(alice.org, evaluation=stored)
    shown = builder.builder_form_from_experiment(experiment)
    payload, errors = builder.experiment_payload(shown)
    assert errors == {} and payload["evaluation"] == stored
    client = signed_in(alice)
    edit = f"/o/acme/experiments/{experiment.id}/edit/"
    page = client.get(edit).content.decode()
    assert f'value="set:{uploaded.id}" selected' in page
    assert f'value="{judge.id}" selected' in page

    def save(**change):
        # What the edit page shows, posted as a browser would, with ``change`` typed in.
        posted = post_data(builder.builder_form_from_experiment(experiment)) | change
        response = client.post(edit, posted)
        assert response.status_code == 302, response.content.decode()[:3000]
        experiment.refresh_from_db()
        return experiment.evaluation

    assert save(description="changed elsewhere") == stored  # kept as it was
    replaced = save(
        evaluation_source="pack:arithmetic",
        evaluation_judge_endpoint_id="",
        evaluation_floor_kind="min_score",
        evaluation_floor_value="0.75",
    )
    assert replaced == {
        "pack": "arithmetic",
        "concurrency": 3,
        "quality_floor": {"min_score": 0.75},
    }
    below_model = save(
        evaluation_floor_kind="max_points_below_best_model", evaluation_floor_value="5"
    )
    assert below_model["quality_floor"] == {"max_points_below_best_model": 5}
    page = client.get(edit).content.decode()
    assert 'value="max_points_below_best_model" selected' in page
    assert (
        save(
            evaluation_source="",
            evaluation_concurrency="",
            evaluation_floor_kind="",
            evaluation_floor_value="",
        )
        == {}
    )


def post_data(form: builder.BuilderForm) -> dict:
    """What a browser posts for the builder showing ``form``."""
    data = {name: value for name, value in form.values.items() if value != ""}
    data["grid_flag"] = [flag for flag, _ in form.grid_rows]
    data["grid_values"] = [values for _, values in form.grid_rows]
    data["fallback_gpu_types"] = list(form.fallbacks)
    return data


@pytest.mark.parametrize(
    ("change", "evaluation", "path", "slot"),
    [
        (
            {"evaluation_source": f"set:{UNKNOWN}"},
            {"set_id": UNKNOWN},
            "evaluation.set_id",
            "evaluation_source",
        ),
        (
            {"evaluation_source": "pack:trivia"},
            {"pack": "trivia"},
            "evaluation.pack",
            "evaluation_source",
        ),
        (
            {"evaluation_source": "pack:arithmetic", "evaluation_concurrency": "0"},
            {"pack": "arithmetic", "concurrency": 0},
            "evaluation.concurrency",
            "evaluation_concurrency",
        ),
        (
            {
                "evaluation_source": "pack:arithmetic",
                "evaluation_floor_kind": "min_score",
                "evaluation_floor_value": "1.5",
            },
            {"pack": "arithmetic", "quality_floor": {"min_score": 1.5}},
            "evaluation.quality_floor.min_score",
            "evaluation_floor",
        ),
        (
            {
                "evaluation_source": "pack:arithmetic",
                "evaluation_floor_kind": "max_points_below_best_model",
                "evaluation_floor_value": "0",
            },
            {"pack": "arithmetic", "quality_floor": {"max_points_below_best_model": 0}},
            "evaluation.quality_floor.max_points_below_best_model",
            "evaluation_floor",
        ),
        (
            {"evaluation_source": "pack:arithmetic", "evaluation_floor_kind": "min_score"},
            {"pack": "arithmetic", "quality_floor": {}},
            "evaluation.quality_floor",
            "evaluation_floor",
        ),
        (
            {"evaluation_floor_kind": "min_score", "evaluation_floor_value": "0.9"},
            {"quality_floor": {"min_score": 0.9}},
            "evaluation",
            "evaluation",
        ),
    ],
    ids=[
        "unknown-set",
        "unknown-pack",
        "concurrency",
        "floor-range",
        "model-floor-range",
        "floor-blank",
        "no-source",
    ],
)
def test_a_refused_evaluation_is_shown_beside_its_input_with_the_apis_message(
    alice, change, evaluation, path, slot
):
    model = make_model(alice.org)
    fields = refused_fields(check(alice, evaluation, model=model))
    assert list(fields) == [path], fields
    message = fields[path][0].replace("'", "&#x27;")
    assert_refused_beside(alice, builder_form(model, **change), path, slot, message)


def test_a_set_with_judge_items_needs_a_judge_in_the_builder_too(alice, charlie):
    uploaded, model = judged_set(alice.org), make_model(alice.org)
    form = builder_form(model, evaluation_source=f"set:{uploaded.id}")
    assert_refused_beside(
        alice,
        form,
        "evaluation.judge_endpoint_id",
        "evaluation_judge_endpoint_id",
        "The set has items scored by a judge",
    )
    theirs = judge_endpoint(charlie.org)
    form["evaluation_judge_endpoint_id"] = str(theirs.id)
    assert_refused_beside(
        alice,
        form,
        "evaluation.judge_endpoint_id",
        "evaluation_judge_endpoint_id",
        "No such endpoint in this organization.",
    )
    form["evaluation_judge_endpoint_id"] = str(judge_endpoint(alice.org).id)
    before = database_state()
    assert signed_in(alice).post("/o/acme/experiments/new/", form).status_code == 302
    assert database_state() != before
    assert Experiment.objects.get(organization=alice.org).evaluation["set_id"] == str(uploaded.id)


def test_another_tenants_set_is_not_offered_and_not_accepted(alice, charlie):
    theirs = judged_set(charlie.org)
    model = make_model(alice.org)
    page = signed_in(alice).get(reverse("experiment-new", args=["acme"])).content.decode()
    assert str(theirs.id) not in page
    assert_refused_beside(
        alice,
        builder_form(model, evaluation_source=f"set:{theirs.id}"),
        "evaluation.set_id",
        "evaluation_source",
        "No such evaluation set in this organization.",
    )


@pytest.mark.parametrize(
    ("path", "slot"),
    [
        ("evaluation", "evaluation"),
        ("evaluation.set_id", "evaluation_source"),
        ("evaluation.pack", "evaluation_source"),
        ("evaluation.judge_endpoint_id", "evaluation_judge_endpoint_id"),
        ("evaluation.concurrency", "evaluation_concurrency"),
        ("evaluation.quality_floor", "evaluation_floor"),
        ("evaluation.quality_floor.min_score", "evaluation_floor"),
        ("evaluation.surprise", "evaluation"),
    ],
)
def test_every_evaluation_error_path_has_its_slot(path, slot):
    assert error_slot(path) == slot
