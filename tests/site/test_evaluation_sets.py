"""Evaluation sets on the site (issue 38): uploaded through the API and checked with the
agent's own parser, refused by line and field with nothing stored, audited, scoped to their
organization, and named by an experiment with a quality floor checked in its spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from agents.evaluation.packs import pack_bytes
from runs.models import AuditEvent, Endpoint, EvaluationSet, Experiment

from .conftest import experiment_payload, make_model
from .db_state import database_state

pytestmark = pytest.mark.django_db

NOT_FOUND = {"error": {"status": 404, "code": "not_found", "message": "Not found."}}
JUDGED = (
    json.dumps({"set": {"scorer": {"kind": "judge", "rubric": "Is {output} right?"}}})
    + "\n"
    + json.dumps({"prompt": "Capital of France?", "reference": "Paris"})
    + "\n"
).encode()


def upload(person, raw: bytes, name: str = "maths", **extra):
    return person.client().post(
        reverse("evaluation-set-list", kwargs={"org": person.org.slug}),
        {"name": name, "file": SimpleUploadedFile("set.jsonl", raw)} | extra,
        format="multipart",
    )


def refused_fields(response) -> dict[str, list[str]]:
    assert response.status_code == 400, response.content
    return response.json()["error"]["fields"]


def files_under(path: Path) -> list[Path]:
    return [p for p in path.rglob("*") if p.is_file()]


def test_it_uploads_a_set_keeps_it_as_sent_and_audits_it(alice, tmp_path):
    raw = pack_bytes("arithmetic")
    response = upload(alice, raw, description="")
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["items"] == 80 and body["needs_judge"] is False
    assert body["summary"]["scorers"] == {"numeric": 80}
    assert "no outside data" in body["summary"]["licence"]
    assert body["description"].startswith("Arithmetic on whole numbers")
    stored = EvaluationSet.objects.get(id=body["id"])
    assert stored.file.read() == raw and stored.size_bytes == len(raw)
    event = AuditEvent.objects.get(event="evaluation_set.upload")
    assert event.target_id == str(stored.id) and event.actor == alice.user
    listed = alice.client().get(reverse("evaluation-set-list", kwargs={"org": "acme"})).json()
    assert [row["id"] for row in listed["results"]] == [body["id"]]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"prompt": "2+2?", "reference": "4"}\n', "line 1: scorer: this item has no scorer"),
        (
            b'{"set": {"scorer": {"kind": "numeric"}}}\n{"prompt": "2+2?", "reference": "4"}\n'
            b'{"prompt": "3+3?", "reference": "six"}\n',
            "line 3: reference: the numeric scorer needs a number",
        ),
        (
            b'{"prompt": "x", "scorer": {"kind": "regex", "pattern": "("}}\n',
            "line 1: scorer.pattern: not a regular expression",
        ),
        (
            b'{"prompt": "x", "scorer": {"kind": "regex", "pattern": "."}}\n'
            + b"[" * 100_000
            + b"\n",
            "line 2: not JSON",
        ),
        (b"\n\n", "no item"),
    ],
)
def test_a_bad_file_is_refused_by_line_and_field_and_nothing_is_stored(
    alice, tmp_path, raw, message
):
    before = database_state()
    (refusal,) = refused_fields(upload(alice, raw))["file"]
    assert refusal.startswith(message), refusal
    assert database_state() == before and files_under(tmp_path) == []


def test_a_blank_name_and_a_file_past_the_limit_are_refused(alice, settings, tmp_path):
    before = database_state()
    assert "name" in refused_fields(upload(alice, pack_bytes("arithmetic"), name=" "))
    settings.DATASET_MAX_BYTES = 1024
    (refusal,) = refused_fields(upload(alice, pack_bytes("arithmetic")))["file"]
    assert "larger than the limit" in refusal
    assert database_state() == before and files_under(tmp_path) == []


def test_a_viewer_cannot_upload(bob):
    before = database_state()
    assert upload(bob, pack_bytes("arithmetic")).status_code == 403
    assert database_state() == before


def test_it_hides_other_tenants_evaluation_sets(alice, charlie):
    theirs = upload(charlie, pack_bytes("arithmetic")).json()["id"]
    client = alice.client()
    detail = reverse("evaluation-set-detail", kwargs={"org": "acme", "pk": theirs})
    assert client.get(detail).json() == NOT_FOUND
    assert client.delete(detail).status_code == 404
    listed = client.get(reverse("evaluation-set-list", kwargs={"org": "acme"})).json()
    assert listed["results"] == []
    other = reverse("evaluation-set-detail", kwargs={"org": "globex", "pk": theirs})
    assert client.get(other).status_code == 404
    assert EvaluationSet.objects.filter(id=theirs).exists()


def check(person, evaluation, model=None, **overrides):
    """The API's check of a draft experiment naming ``evaluation``: writes nothing."""
    model = model or make_model(person.org)
    return person.client().post(
        reverse("experiment-validate", kwargs={"org": person.org.slug}),
        experiment_payload(model.id, evaluation=evaluation, **overrides),
        format="json",
    )


def test_an_experiment_names_a_set_or_a_pack_with_a_quality_floor(alice):
    set_id = upload(alice, pack_bytes("arithmetic")).json()["id"]
    model = make_model(alice.org)
    evaluation = {"set_id": set_id, "quality_floor": {"max_points_below_best": 2}}
    response = alice.client().post(
        reverse("experiment-list", kwargs={"org": "acme"}),
        experiment_payload(model.id, evaluation=evaluation),
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["evaluation"] == evaluation | {"concurrency": 4}
    experiment = Experiment.objects.get(id=response.json()["id"])
    assert experiment.evaluation["set_id"] == set_id
    # Named by an experiment: it cannot be deleted.
    detail = reverse("evaluation-set-detail", kwargs={"org": "acme", "pk": set_id})
    assert alice.client().delete(detail).status_code == 409
    assert EvaluationSet.objects.filter(id=set_id).exists()
    pack = {"pack": "arithmetic", "quality_floor": {"min_score": 0.9}, "concurrency": 2}
    assert check(alice, pack, model=model).status_code == 200


def test_a_floor_below_the_best_model_is_stored_as_given(alice):
    evaluation = {"pack": "arithmetic", "quality_floor": {"max_points_below_best_model": 5}}
    response = alice.client().post(
        reverse("experiment-list", kwargs={"org": "acme"}),
        experiment_payload(make_model(alice.org).id, evaluation=evaluation),
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["evaluation"] == evaluation | {"concurrency": 4}
    stored = Experiment.objects.get(id=response.json()["id"]).evaluation
    assert stored["quality_floor"] == {"max_points_below_best_model": 5}


def test_an_unused_set_is_deleted_and_audited(alice):
    set_id = upload(alice, pack_bytes("arithmetic")).json()["id"]
    detail = reverse("evaluation-set-detail", kwargs={"org": "acme", "pk": set_id})
    assert alice.client().delete(detail).status_code == 204
    assert not EvaluationSet.objects.filter(id=set_id).exists()
    assert AuditEvent.objects.filter(event="evaluation_set.delete", target_id=set_id).exists()


@pytest.mark.parametrize(
    ("evaluation", "field", "words"),
    [
        ({"pack": "trivia"}, "evaluation.pack", "Input should be 'arithmetic'"),
        ({"pack": "arithmetic", "set_id": "00000000-0000-0000-0000-000000000001"}, "evaluation",
         "one"),
        ({"set_id": "00000000-0000-0000-0000-000000000001"}, "evaluation.set_id",
         "No such evaluation set"),
        ({"pack": "arithmetic", "quality_floor": {}}, "evaluation.quality_floor", "min_score"),
        ({"pack": "arithmetic", "quality_floor": {"min_score": 1.5}},
         "evaluation.quality_floor.min_score", "less than or equal to 1"),
        ({"pack": "arithmetic", "quality_floor": {"min_score": 0.5, "max_points_below_best": 1}},
         "evaluation.quality_floor", "one of them"),
        ({"pack": "arithmetic",
          "quality_floor": {"max_points_below_best": 1, "max_points_below_best_model": 1}},
         "evaluation.quality_floor", "one of them"),
        ({"pack": "arithmetic", "quality_floor": {"max_points_below_best_model": 0}},
         "evaluation.quality_floor.max_points_below_best_model", "greater than 0"),
        ({"pack": "arithmetic", "quality_floor": {"max_points_below_best_model": 101}},
         "evaluation.quality_floor.max_points_below_best_model", "less than or equal to 100"),
        ({"pack": "arithmetic", "concurrency": 0}, "evaluation.concurrency", "greater than"),
        ({"pack": "arithmetic", "judge_endpoint_id": "00000000-0000-0000-0000-000000000001"},
         "evaluation.judge_endpoint_id", "No such endpoint"),
    ],
)  # fmt: skip  # a table
def test_a_bad_evaluation_is_refused_on_its_field(alice, evaluation, field, words):
    model = make_model(alice.org)
    before = database_state()
    fields = refused_fields(check(alice, evaluation, model=model))
    assert any(words in message for message in fields[field]), fields
    assert database_state() == before


def test_a_set_with_judge_items_needs_a_judge_endpoint_of_the_organization(alice, charlie):
    uploaded = upload(alice, JUDGED, name="judged").json()
    set_id, model = uploaded["id"], make_model(alice.org)
    assert uploaded["needs_judge"] is True
    fields = refused_fields(check(alice, {"set_id": set_id}, model=model))
    assert "needs" not in str(fields) and "judge" in fields["evaluation.judge_endpoint_id"][0]
    theirs = Endpoint.objects.create(
        organization=charlie.org,
        name="judge",
        base_url="https://judge.example",
        served_model_name="judge",
    )
    fields = refused_fields(
        check(alice, {"set_id": set_id, "judge_endpoint_id": str(theirs.id)}, model=model)
    )
    assert fields["evaluation.judge_endpoint_id"] == ["No such endpoint in this organization."]
    ours = Endpoint.objects.create(
        organization=alice.org,
        name="judge",
        base_url="https://judge.example",
        served_model_name="judge",
    )
    judged = {"set_id": set_id, "judge_endpoint_id": str(ours.id)}
    assert check(alice, judged, model=model).status_code == 200
    fields = refused_fields(
        check(alice, {"pack": "arithmetic", "judge_endpoint_id": str(ours.id)}, model=model)
    )
    assert fields["evaluation.judge_endpoint_id"] == ["The set has no item scored by a judge."]
