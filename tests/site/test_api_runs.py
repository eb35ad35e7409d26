"""Runs are readable with their trials and measurements, only by their organization."""

from __future__ import annotations

import uuid

from agents import protocol
from runs.models import Experiment, Measurement, Run, Trial
from runs.services.experiments import experiment_update

from .conftest import SYSTEM, frozen, make_experiment


def _run_with_results(org):
    experiment = make_experiment(org)
    run = Run.objects.create(
        organization=org, experiment=experiment, reason="ci abc123", **frozen(experiment)
    )
    trial = Trial.objects.create(
        organization_id=run.organization_id,
        run=run,
        index=0,
        serve_config={"max_num_seqs": 64},
        command=["vllm", "serve", "m"],
    )
    Measurement.objects.create(
        organization_id=trial.organization_id,
        trial=trial,
        concurrency=8,
        result={"p99_ttft_ms": 41.5},
    )
    return run


def test_it_lists_runs_newest_first_and_filters_by_state(alice):
    run = _run_with_results(alice.org)
    client = alice.client()
    listed = client.get("/api/v1/orgs/acme/runs/").json()["results"]
    assert [r["id"] for r in listed] == [str(run.id)]
    assert "trials" not in listed[0]
    assert client.get("/api/v1/orgs/acme/runs/?state=failed").json()["results"] == []


def test_it_shows_trials_and_measurements_in_the_detail(alice):
    run = _run_with_results(alice.org)
    detail = alice.client().get(f"/api/v1/orgs/acme/runs/{run.id}/").json()
    assert detail["reason"] == "ci abc123"
    [trial] = detail["trials"]
    assert trial["command"] == ["vllm", "serve", "m"]
    assert trial["measurements"][0]["result"] == {"p99_ttft_ms": 41.5}


def test_it_shows_what_the_run_does_as_it_was_started(alice):
    run = _run_with_results(alice.org)
    started = run.job_spec
    experiment_update(
        experiment=run.experiment,
        actor=SYSTEM,
        serve_grid={"max_num_seqs": [16, 32]},
        slos={"ttft_ms": 900},
    )
    detail = alice.client().get(f"/api/v1/orgs/acme/runs/{run.id}/").json()
    assert detail["job_spec"] == started
    job = protocol.JobSpec.model_validate(
        {**detail["job_spec"], "run_id": str(run.id), "deadline": "2030-01-01T00:00:00Z"}
    )
    assert [trial.serve_config for trial in job.trials] == [
        {"max_num_seqs": 64},
        {"max_num_seqs": 128},
    ]


def test_it_hides_other_tenants_runs(alice, charlie):
    run = _run_with_results(alice.org)
    foreign = charlie.client().get(f"/api/v1/orgs/globex/runs/{run.id}/")
    assert foreign.status_code == 404
    assert charlie.client().get("/api/v1/orgs/globex/runs/").json()["results"] == []


def _run_with_id(org, run_id: str) -> Run:
    experiment = Experiment.objects.filter(organization=org).first() or make_experiment(org)
    return Run.objects.create(
        id=uuid.UUID(run_id),
        organization=org,
        experiment=experiment,
        reason="r",
        **frozen(experiment),
    )


def test_it_finds_a_run_by_the_short_id_the_site_shows(alice):
    run = _run_with_id(alice.org, "75bae280-1111-4000-8000-000000000001")
    _run_with_id(alice.org, "75bae281-1111-4000-8000-000000000001")
    client = alice.client()
    for prefix in ("75bae280", "75BAE280", "75bae280-11"):
        detail = client.get(f"/api/v1/orgs/acme/runs/{prefix}/")
        assert detail.status_code == 200, detail.content
        assert detail.json()["id"] == str(run.id)
    cancel = client.post(
        "/api/v1/orgs/acme/runs/75bae280/cancel/", {"reason": "x"}, content_type="application/json"
    )
    assert cancel.json()["id"] == str(run.id)


def test_it_refuses_a_prefix_several_runs_share_naming_the_field(alice):
    _run_with_id(alice.org, "75bae280-1111-4000-8000-000000000001")
    _run_with_id(alice.org, "75bae280-2222-4000-8000-000000000001")
    answer = alice.client().get("/api/v1/orgs/acme/runs/75bae280/")
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"]["run"] == [
        "The id prefix '75bae280' matches 2 runs; give more of the id."
    ]
    assert alice.client().get("/api/v1/orgs/acme/runs/75bae2801/").status_code == 200


def test_it_hides_other_tenants_runs_from_a_prefix_too(alice, charlie):
    _run_with_id(alice.org, "75bae280-1111-4000-8000-000000000001")
    theirs = charlie.client().get("/api/v1/orgs/globex/runs/75bae280/")
    assert theirs.status_code == 404
    # One run of each: charlie's prefix finds his own, never counts alice's.
    own = _run_with_id(charlie.org, "75bae280-2222-4000-8000-000000000001")
    assert charlie.client().get("/api/v1/orgs/globex/runs/75bae280/").json()["id"] == str(own.id)
    assert alice.client().get("/api/v1/orgs/acme/runs/7/").status_code == 404  # too short
