"""Validating an experiment file whose experiment exists (issue 35, point 7): no error, a
warning that says so and in which fields the file differs, and nothing stored."""

from __future__ import annotations

from runs.models import AuditEvent, Experiment

from .conftest import experiment_payload, make_model

VALIDATE = "/api/v1/orgs/acme/experiments/validate/"


def test_it_validates_a_file_whose_experiment_exists_and_says_how_they_differ(alice):
    client = alice.client()
    payload = experiment_payload(make_model(alice.org).id)
    fresh = client.post(VALIDATE, payload, format="json")
    assert fresh.status_code == 200 and not any("exists" in w for w in fresh.json()["warnings"])
    assert client.post("/api/v1/orgs/acme/experiments/", payload, format="json").status_code == 201
    events = AuditEvent.objects.count()

    same = client.post(VALIDATE, payload, format="json")
    assert same.status_code == 200, same.json()
    assert same.json()["warnings"][0] == (
        "An experiment named 'api-experiment' exists: a run of that name runs it as stored, "
        "which this file matches."
    )
    changed = payload | {"serve_grid": {"max_num_seqs": [64]}, "slos": {"ttft_ms": 400}}
    differs = client.post(VALIDATE, changed, format="json")
    assert differs.status_code == 200, differs.json()
    assert differs.json()["warnings"][0] == (
        "An experiment named 'api-experiment' exists: a run of that name runs it as stored; "
        "this file differs from it in serve_grid, slos."
    )
    assert differs.json()["trials"] == 1  # the file's grid is estimated, not the stored one
    stored = Experiment.objects.get()
    assert stored.serve_grid == payload["serve_grid"]
    assert AuditEvent.objects.count() == events

    # Creating it again is still refused: only a check lets the name be taken.
    again = client.post("/api/v1/orgs/acme/experiments/", payload, format="json")
    assert again.status_code == 400
    assert again.json()["error"]["fields"]["name"] == [
        "An experiment named 'api-experiment' exists."
    ]
