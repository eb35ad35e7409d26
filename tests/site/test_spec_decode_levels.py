"""Speculative decoding's acceptance rate (issue 34): the agent's level report carries it
from vLLM's counters; the site stores it with the level, serves it in the API and shows it on
the run page; a level without it (the simulator, no speculative decoding) shows none."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from runs.models import Measurement

from .conftest import experiment_payload, make_model, signed_in
from .test_agent_ingest import messages
from .test_web_level_schedule import _run
from .test_web_runs import text_of

pytestmark = pytest.mark.django_db

SPEC_SERVER = {
    "kv_cache_usage_perc": {"max": 0.4},
    "spec_decode_num_drafts": 100.0,
    "spec_decode_num_draft_tokens": 300.0,
    "spec_decode_num_accepted_tokens": 180.0,
    "spec_decode_acceptance_rate": 0.6,
    "spec_decode_mean_acceptance_length": 2.8,
}


def _fed(run, token, server) -> None:
    hello, started, phase, _, measurement, finished, _ = messages(run.id)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    batch = [hello, started, phase, measurement | {"server": server}, finished]
    response = agent.post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200 and response.json()["rejected"] == []


def test_it_stores_serves_and_shows_the_acceptance_rate(alice):
    run, token = _run(alice.org)
    _fed(run, token, SPEC_SERVER)
    stored = Measurement.objects.get(trial__run=run).server_metrics
    assert stored["spec_decode_acceptance_rate"] == 0.6
    api = reverse("run-detail", kwargs={"org": "acme", "pk": run.id})
    (trial,) = alice.client().get(api).json()["trials"]
    (served,) = trial["measurements"]
    assert served["server_metrics"]["spec_decode_acceptance_rate"] == 0.6
    assert served["server_metrics"]["spec_decode_mean_acceptance_length"] == 2.8
    page = text_of(signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode())
    assert (
        "Speculative decoding: 0.600 of the proposed tokens accepted, 2.80 tokens per draft step"
        in page
    )


def test_a_level_without_it_shows_none(alice):
    run, token = _run(alice.org)
    _fed(run, token, {"kv_cache_usage_perc": {"max": 0.4}, "spec_decode_acceptance_rate": None})
    page = text_of(signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode())
    assert "Speculative decoding" not in page


def test_the_simulator_needs_an_acceptance_rate_it_has_no_default_for(alice):
    model = make_model(alice.org)
    grid = {"speculative_config": [{"method": "ngram", "num_speculative_tokens": 3}]}
    sim = experiment_payload(model.id, engine="sim", engine_image_tag="", serve_grid=grid)
    response = alice.client().post("/api/v1/orgs/acme/experiments/", sim, format="json")
    assert response.status_code == 400
    fields = response.json()["error"]["fields"]
    (message,) = fields["serve_grid.speculative_config[0].acceptance_rate"]
    assert message.startswith("the simulator needs the share of proposed tokens ngram")
    # Given one (or MTP's documented default), the simulator models it.
    given = {
        "speculative_config": [
            {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6},
            {"method": "mtp", "num_speculative_tokens": 1},
        ]
    }
    sim = experiment_payload(model.id, engine="sim", engine_image_tag="", serve_grid=given)
    sim["name"] = "simulated speculation"
    response = alice.client().post("/api/v1/orgs/acme/experiments/", sim, format="json")
    assert response.status_code == 201, response.json()
    real = experiment_payload(model.id, engine_image_tag="v0.13.0", serve_grid=grid)
    response = alice.client().post("/api/v1/orgs/acme/experiments/", real, format="json")
    assert response.status_code == 201, response.json()
    # Real vLLM measures the rate: it is not an input there.
    real = experiment_payload(model.id, engine_image_tag="v0.13.0", serve_grid=given)
    real["name"] = "real speculation"
    response = alice.client().post("/api/v1/orgs/acme/experiments/", real, format="json")
    assert response.status_code == 400
    assert "serve_grid.speculative_config[0].acceptance_rate" in response.json()["error"]["fields"]
