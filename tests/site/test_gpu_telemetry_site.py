"""GPU telemetry on the site (issue 20): a measurement's per-GPU mean and max are stored as the
agent sent them, served by the API and shown in the run page's level tables; the live
progress's readings feed the run page's GPU chart; an older agent's measurements (protocol
6, none) and a stored entry the protocol no longer reads show the rest, never a 500. End to
end, a real agent runner sampling the stand-in NVML streams all of it into the site."""

from __future__ import annotations

import uuid

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from runs.models import Measurement, Run
from runs.services.run_tokens import run_token_issue
from tests.fakes import nvml
from tests.fakes.nvml import FakeGpu, write_gpus

from .conftest import frozen, make_experiment, signed_in
from .test_agent_ingest import messages
from .test_web_runs import live_url, text_of

H100 = {
    "index": 0,
    "name": "NVIDIA H100 80GB HBM3",
    "samples": 12,
    "memory_total_mib": 81559.0,
    "utilization_pct": {"mean": 57.4, "max": 60.0},
    "memory_used_mib": {"mean": 61234.0, "max": 61300.0},
    "power_w": {"mean": 312.5, "max": 330.0},
    "sm_clock_mhz": {"mean": 1980.0, "max": 1980.0},
    "temperature_c": {"mean": 61.2, "max": 63.0},
}
NO_POWER = H100 | {"index": 1, "utilization_pct": {"mean": 12.0, "max": 15.0}, "power_w": None}
READINGS = [
    {"index": 0, "utilization_pct": 57.0, "memory_used_mib": 40779.5, "memory_total_mib": 81559.0},
    {"index": 1, "utilization_pct": 12.0},
]


def gpu_run(org) -> tuple[Run, str]:
    experiment = make_experiment(org, name=f"e-{uuid.uuid4()}")
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    return run, run_token_issue(run=run)


def fed_with_gpus(run, token, *, gpus=True) -> None:
    """One trial's messages, the progress and measurement with GPU telemetry (or without:
    as a protocol 6 agent sent them)."""
    batch = messages(run.id)[:6]
    if gpus:
        batch[3] = batch[3] | {"gpus": READINGS}
        batch[4] = batch[4] | {"gpus": [H100, NO_POWER]}
    else:
        batch = [message | {"protocol": 6} for message in batch]
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = agent.post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": batch}, format="json"
    )
    assert response.status_code == 200 and response.json()["rejected"] == []


@pytest.mark.django_db
def test_each_gpus_figures_are_stored_served_and_shown(alice):
    run, token = gpu_run(alice.org)
    fed_with_gpus(run, token)
    measurement = Measurement.objects.get(trial__run=run)
    assert measurement.gpus == [H100, NO_POWER]
    api = reverse("run-detail", kwargs={"org": "acme", "pk": run.id})
    (trial,) = alice.client().get(api).json()["trials"]
    assert trial["measurements"][0]["gpus"] == [H100, NO_POWER]
    client = signed_in(alice)
    html = client.get(f"/o/acme/runs/{run.id}/").content.decode()
    text = text_of(html)
    assert "GPUs c=8 · utilization 57, 12 % mean" in text
    # GPU, utilization, memory used (of total), power, SM clock, temperature, samples.
    assert (
        "0 · NVIDIA H100 80GB HBM3 57 / 60 61234 / 61300 of 81559 313 / 330 1980 / 1980 61 / 63 12"
        in text
    )
    assert "1 · NVIDIA H100 80GB HBM3 12 / 15 61234 / 61300 of 81559 — 1980 / 1980" in text
    # The live progress's readings, for the GPU chart (drawn by the script).
    state = client.get(live_url(run)).json()
    (point,) = state["progress"]
    assert point["gpus"] == [
        READINGS[0],
        {"index": 1, "utilization_pct": 12.0, "memory_used_mib": None, "memory_total_mib": None},
    ]
    assert 'id="chart-gpu"' in html


@pytest.mark.django_db
def test_an_older_agents_levels_and_a_malformed_entry_show_the_rest(alice):
    run, token = gpu_run(alice.org)
    fed_with_gpus(run, token, gpus=False)
    measurement = Measurement.objects.get(trial__run=run)
    assert measurement.gpus == []
    client = signed_in(alice)
    text = text_of(client.get(f"/o/acme/runs/{run.id}/").content.decode())
    assert "c=8" in text and "GPUs c=8" not in text
    measurement.gpus = [{"index": "first"}, H100]
    measurement.save(update_fields=["gpus"])
    response = client.get(f"/o/acme/runs/{run.id}/")
    assert response.status_code == 200
    assert "GPUs c=8 · utilization 57 % mean" in text_of(response.content.decode())


@pytest.mark.django_db(transaction=True)
def test_a_real_runner_streams_the_gpus_it_sampled_into_the_site(alice, tmp_path, monkeypatch):
    from .test_agent_runs import Site, assert_site_holds_the_journal, new_sim_run, run_agent

    nvml.preload(nvml.build(tmp_path))
    readings = tmp_path / "gpus.txt"
    write_gpus(readings, [FakeGpu(utilization_pct=88, memory_used_mib=70_000, power_mw=650_000)])
    monkeypatch.setenv(nvml.ENV, str(readings))
    run, token = new_sim_run(alice.org, serve_grid={"max_num_seqs": [8]})
    options = {"gpu_telemetry": True, "gpu_period": 0.05, "progress_every": 0.05}
    result, journal = run_agent(run, token, tmp_path, Site(run.id, token), runner_options=options)
    assert result.exit_code == 0 and result.delivery.pending == 0
    assert_site_holds_the_journal(run, journal)
    for measurement in Measurement.objects.filter(trial__run=run):
        (gpu,) = measurement.gpus
        assert gpu["utilization_pct"] == {"mean": 88.0, "max": 88.0} and gpu["samples"] >= 1
        assert gpu["power_w"] == {"mean": 650.0, "max": 650.0}
    text = text_of(signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode())
    assert "GPUs c=4 · utilization 88 % mean" in text
