"""trust_remote_code as an explicit, audited experiment setting, and the parallelism flags
checked against the experiment's model and GPUs through the API."""

from __future__ import annotations

import pytest

from runs.models import AuditEvent, Experiment, Trial
from runs.recipes import trial_recipe
from runs.run_as_started import run_model
from runs.services.experiments import experiment_update
from runs.services.run_start import run_start
from tests.agents.test_hf_configs import MIXTRAL_8X7B

from .conftest import SYSTEM, experiment_payload, make_experiment, make_model, signed_in
from .test_model_hf_config import registered

pytestmark = pytest.mark.django_db

URL = "/api/v1/orgs/acme/experiments/"


def trust_events(org) -> list[tuple]:
    return [
        (event.actor_label, event.before, event.after)
        for event in AuditEvent.objects.filter(
            organization=org, event="experiment.trust_remote_code"
        ).order_by("seq")
    ]


def test_it_stores_audits_and_sends_trust_remote_code_to_the_agent(alice):
    model = make_model(alice.org)
    response = alice.client().post(
        URL, experiment_payload(model.id, trust_remote_code=True), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["trust_remote_code"] is True
    experiment = Experiment.objects.get(pk=response.json()["id"])
    assert trust_events(alice.org) == [
        ("alice@acme.example", {"trust_remote_code": False}, {"trust_remote_code": True})
    ]
    run = run_start(actor=SYSTEM, experiment=experiment, reason="kimi")
    assert run_model(run).trust_remote_code is True
    assert run.job_spec["model"]["trust_remote_code"] is True
    trial = Trial.objects.create(
        organization_id=run.organization_id, run=run, index=0, serve_config={"max_num_seqs": 64}
    )
    # The promotion recipe deploys what was benchmarked: the model's code trusted.
    assert "--trust-remote-code" in trial_recipe(trial=trial)["serve_argv"]


def test_it_audits_each_change_and_nothing_when_it_stays(alice):
    experiment = make_experiment(alice.org, trust_remote_code=True)
    experiment_update(experiment=experiment, actor=SYSTEM, description="same trust")
    experiment_update(experiment=experiment, actor=SYSTEM, trust_remote_code=False)
    assert [after for _, _, after in trust_events(alice.org)] == [
        {"trust_remote_code": True},
        {"trust_remote_code": False},
    ]


def test_without_it_the_job_carries_no_such_key(alice):
    run = run_start(actor=SYSTEM, experiment=make_experiment(alice.org), reason="plain")
    assert run_model(run).trust_remote_code is False
    assert "trust_remote_code" not in run.job_spec["model"]
    assert trust_events(alice.org) == []


def test_it_refuses_trust_remote_code_for_the_simulator_naming_the_field(alice):
    model = make_model(alice.org)
    response = alice.client().post(
        URL,
        experiment_payload(model.id, engine="sim", engine_image_tag="", trust_remote_code=True),
        format="json",
    )
    assert response.status_code == 400
    assert "trust_remote_code" in response.json()["error"]["fields"]
    assert not Experiment.objects.exists() and trust_events(alice.org) == []


def test_it_refuses_the_flag_in_the_grid_pointing_at_the_setting(alice):
    model = make_model(alice.org)
    response = alice.client().post(
        URL, experiment_payload(model.id, serve_grid={"trust_remote_code": [True]}), format="json"
    )
    assert response.status_code == 400
    (message,) = response.json()["error"]["fields"]["serve_grid.trust_remote_code"]
    assert "set trust_remote_code on the experiment" in message


def test_the_builder_says_whose_pod_runs_the_code(alice, web):
    make_model(alice.org)
    page = web.get("/o/acme/experiments/new/").content.decode()
    assert 'name="trust_remote_code"' in page
    assert "The model&#x27;s own code runs in your pod" in page or (
        "The model's own code runs in your pod" in page
    )


# --- data, expert and decode context parallelism through the API ----------------------------


def test_it_refuses_expert_parallelism_for_a_dense_model(alice):
    model = make_model(alice.org)
    grid = {"tensor_parallel_size": [2], "enable_expert_parallel": [True]}
    response = alice.client().post(
        URL, experiment_payload(model.id, gpu_count=2, serve_grid=grid), format="json"
    )
    assert response.status_code == 400
    assert (
        "mixture-of-experts"
        in response.json()["error"]["fields"]["serve_grid.enable_expert_parallel[0]"][0]
    )
    assert not Experiment.objects.exists()


def test_it_accepts_expert_parallelism_for_a_moe_model_across_gpus(alice):
    model = registered(alice, MIXTRAL_8X7B, "mistralai/Mixtral-8x7B-v0.1")
    grid = {
        "tensor_parallel_size": [2],
        "data_parallel_size": [2],
        "enable_expert_parallel": [True],
    }
    response = alice.client().post(
        URL,
        experiment_payload(model.id, gpu_count=4, serve_grid=grid, engine_image_tag="v0.13.0"),
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert response.json()["serve_grid"] == grid


def test_it_refuses_dp_beyond_the_pods_gpus_and_dcp_not_dividing_tp(alice):
    model = make_model(alice.org)
    grid = {
        "tensor_parallel_size": [2],
        "data_parallel_size": [2],
        "decode_context_parallel_size": [4],
    }
    response = alice.client().post(
        URL, experiment_payload(model.id, gpu_count=2, serve_grid=grid), format="json"
    )
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert fields["serve_grid.tensor_parallel_size[0]"] == [
        "tensor_parallel_size 2 x data_parallel_size 2 needs 4 GPUs; the experiment has 2"
    ]
    assert "serve_grid.decode_context_parallel_size[0]" in fields


def test_it_hides_other_tenants_experiments_trust_setting(alice, charlie):
    experiment = make_experiment(alice.org, trust_remote_code=True)
    response = charlie.client().patch(
        f"/api/v1/orgs/acme/experiments/{experiment.id}/",
        {"trust_remote_code": False},
        format="json",
    )
    assert response.status_code == 404
    assert Experiment.objects.get(pk=experiment.pk).trust_remote_code is True
    assert signed_in(charlie).get(f"/o/acme/experiments/{experiment.id}/").status_code == 404
