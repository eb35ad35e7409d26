"""LoRA adapters named in an experiment (issue 34): checked with a clear error per field,
refused for engines that serve none, frozen into the run's job for the agent to download and
spread requests over, and deployed by the promotion recipe."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from runs.models import Experiment, Trial
from runs.recipes import trial_recipe
from runs.services.run_start import run_start

from .conftest import SYSTEM, experiment_payload, make_model, signed_in
from .test_agent_ingest import RESULT, messages
from .test_web_experiments import builder_form
from .test_web_level_schedule import _run
from .test_web_runs import text_of

pytestmark = pytest.mark.django_db

URL = "/api/v1/orgs/acme/experiments/"
ADAPTERS = [
    {"name": "sql", "hf_repo": "org/sql-lora", "revision": "0123abc"},
    {"name": "chat", "hf_repo": "org/chat-lora", "revision": "v1"},
]


def test_it_stores_the_adapters_and_sends_them_to_the_agent(alice):
    model = make_model(alice.org)
    response = alice.client().post(
        URL, experiment_payload(model.id, lora_adapters=ADAPTERS), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["lora_adapters"] == ADAPTERS
    experiment = Experiment.objects.get(pk=response.json()["id"])
    run = run_start(actor=SYSTEM, experiment=experiment, reason="adapters")
    assert run.job_spec["model"]["lora_adapters"] == ADAPTERS
    trial = Trial.objects.create(
        organization_id=run.organization_id, run=run, index=0, serve_config={"max_num_seqs": 64}
    )
    argv = trial_recipe(trial=trial)["serve_argv"]
    at = argv.index("--enable-lora")
    assert argv[at:] == ["--enable-lora", "--lora-modules", "sql=org/sql-lora",
                         "chat=org/chat-lora", "--max-loras", "2"]  # fmt: skip  # flag, value


def test_without_adapters_the_job_carries_no_such_key(alice):
    model = make_model(alice.org)
    response = alice.client().post(URL, experiment_payload(model.id), format="json")
    experiment = Experiment.objects.get(pk=response.json()["id"])
    run = run_start(actor=SYSTEM, experiment=experiment, reason="plain")
    assert "lora_adapters" not in run.job_spec["model"]


def test_it_refuses_each_bad_adapter_on_its_own_field_and_stores_nothing(alice):
    model = make_model(alice.org)
    adapters = [
        {"name": "sql", "hf_repo": "not a repo", "revision": "main"},
        {"name": "sql", "hf_repo": "org/b"},
        {"name": "-sql", "hf_repo": "org/c", "revision": "..", "rank": 8},
    ]
    response = alice.client().post(
        URL, experiment_payload(model.id, lora_adapters=adapters), format="json"
    )
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    assert "Hugging Face repo id" in fields["lora_adapters[0].hf_repo"][0]
    assert fields["lora_adapters[1].name"] == ["sql is also adapter [0]"]
    assert fields["lora_adapters[1].revision"] == ["pin the adapter to a revision"]
    assert fields["lora_adapters[2].name"][0].startswith("expected 1 to 64 letters, digits")
    assert "branch, tag or commit" in fields["lora_adapters[2].revision"][0]
    assert fields["lora_adapters[2].rank"] == ["not an adapter field"]
    assert not Experiment.objects.exists()


def test_it_refuses_adapters_for_the_simulator_and_lora_flags_in_the_grid(alice):
    model = make_model(alice.org)
    sim = experiment_payload(model.id, engine="sim", engine_image_tag="", lora_adapters=ADAPTERS)
    response = alice.client().post(URL, sim, format="json")
    assert response.status_code == 400
    assert (
        "Only real vLLM serves LoRA adapters"
        in response.json()["error"]["fields"]["lora_adapters"][0]
    )
    grid = experiment_payload(model.id, serve_grid={"lora_modules": [["a=b/c"]]})
    response = alice.client().post(URL, grid, format="json")
    (message,) = response.json()["error"]["fields"]["serve_grid.lora_modules"]
    assert "name LoRA adapters on the experiment (lora_adapters)" in message


def test_it_hides_other_tenants_adapters(alice, charlie):
    model = make_model(alice.org)
    response = alice.client().post(
        URL, experiment_payload(model.id, lora_adapters=ADAPTERS), format="json"
    )
    other = charlie.client().get(f"{URL.replace('acme', 'acme')}{response.json()['id']}/")
    assert other.status_code == 404


def test_the_builder_takes_adapters_one_per_line_and_shows_their_errors(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    form = builder_form(model, lora_adapters="sql org/sql-lora 0123abc\nchat org/chat-lora v1\n")
    response = client.post("/o/acme/experiments/new/", form)
    assert response.status_code == 302
    assert Experiment.objects.get().lora_adapters == ADAPTERS
    # Editing shows them as they were typed.
    edit = client.get(f"/o/acme/experiments/{Experiment.objects.get().id}/edit/")
    assert "sql org/sql-lora 0123abc\nchat org/chat-lora v1" in edit.content.decode()
    bad = builder_form(model, name="bad", lora_adapters="sql org/sql-lora")
    page = text_of(client.post("/o/acme/experiments/new/", bad).content.decode())
    assert "lora_adapters[0].revision: pin the adapter to a revision" in page


def test_the_run_page_shows_the_spread_over_adapters(alice):
    run, token = _run(alice.org)
    hello, started, phase, _, measurement, finished, _ = messages(run.id)
    spread = measurement | {"result": RESULT | {"lora_requests": {"sql": 3, "chat": 2}}}
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = agent.post(
        f"/api/v1/agent/runs/{run.id}/messages/",
        {"messages": [hello, started, phase, spread, finished]},
        format="json",
    )
    assert response.status_code == 200 and response.json()["rejected"] == []
    page = text_of(signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode())
    assert "Requests by LoRA adapter: sql 3 · chat 2" in page
