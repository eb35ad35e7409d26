"""Cold starts end to end: a run's waterfall from the pod request to the first token on its
page, and every run's by (GPU type, image) in a report with median and p90."""

from __future__ import annotations

import datetime

import pytest

from runs.models import AgentMessageRecord, Run, Trial
from runs.selectors.cold_starts import cold_start_report, cold_start_waterfall
from runs.selectors.vllm_versions import vllm_version_mismatch

from .conftest import H100, frozen, make_experiment, make_model, signed_in

pytestmark = pytest.mark.django_db

T0 = datetime.datetime(2026, 12, 1, 9, 0, tzinfo=datetime.UTC)


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


ENGINE = {"process_start": 0.0, "weights_loaded": 30.0, "health_ready": 50.0, "first_token": 51.0}


def test_the_waterfall_chains_every_observed_moment_from_the_pod_request():
    steps = cold_start_waterfall(
        requested=at(0),
        running=at(40),
        container_up=at(70),
        agent_ready=at(75),
        weights_fetch={"seconds": 120.0, "bytes": 16_060_000_000, "mb_per_s": 133.8},
        engine_phases={"first_token": 51.0, "health_ready": 50.0, "process_start": 0.0},
    )
    assert [(s.label, s.start, s.seconds) for s in steps] == [
        ("Pod requested → running (provider)", 0.0, 40.0),
        ("Container up (the agent's first message)", 40.0, 30.0),
        ("Agent ready (its first trial starts)", 70.0, 5.0),
        ("Weights downloaded", 75.0, 120.0),
        ("vLLM: process start", 195.0, 0.0),
        ("vLLM: health ready", 195.0, 50.0),
        ("vLLM: first token", 245.0, 1.0),
    ]
    assert steps[3].note == "16.06 GB at 133.8 MB/s"
    # A moment nobody saw is left out; the chain goes on from the last one seen.
    unseen = cold_start_waterfall(
        requested=at(0),
        running=None,
        container_up=at(70),
        agent_ready=None,
        weights_fetch={"seconds": 0.2, "cached": True},
        engine_phases={},
    )
    assert [(s.label, s.start, s.seconds, s.note) for s in unseen] == [
        ("Container up (the agent's first message)", 0.0, 70.0, ""),
        ("Weights downloaded", 70.0, 0.2, "found in the weights cache"),
    ]
    assert (
        cold_start_waterfall(
            requested=None,
            running=None,
            container_up=None,
            agent_ready=None,
            weights_fetch={},
            engine_phases={},
        )
        == []
    )


def rented_run(experiment, *, running: float, hello: float, ready: float, weights=None):
    run = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        state="succeeded",
        pod_gpu_type=H100,
        pod_started_at=at(0),
        pod_running_at=at(running),
        started_at=at(ready),
        finished_at=at(ready + 600),
        weights_fetch=weights or {},
        **frozen(experiment),
    )
    AgentMessageRecord.objects.create(
        organization=run.organization,
        run=run,
        seq=0,
        type="hello",
        payload={},
        received_at=at(hello),
    )
    Trial.objects.create(
        organization=run.organization, run=run, index=0, serve_config={}, cold_start=ENGINE
    )
    return run


def test_the_run_page_draws_its_cold_start(alice):
    run = rented_run(
        make_experiment(alice.org),
        running=40,
        hello=70,
        ready=75,
        weights={"seconds": 120.0, "bytes": 2_000_000_000, "mb_per_s": 16.7, "cached": False},
    )
    page = signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode()
    assert "Cold start" in page and "Pod requested → running (provider)" in page
    assert "Weights downloaded" in page and "2.00 GB at 16.7 MB/s" in page
    assert "vLLM: first token" in page


def test_the_report_gives_median_and_p90_per_gpu_type_and_image(alice, charlie):
    experiment = make_experiment(alice.org)
    for running, weights in ((10, 100.0), (20, 200.0), (40, None)):
        fetch = (
            {"seconds": weights, "cached": False} if weights else {"seconds": 0.1, "cached": True}
        )
        rented_run(
            experiment, running=running, hello=running + 30, ready=running + 35, weights=fetch
        )
    # Another tenant's run and a simulated run are never mixed into acme's measured figures.
    rented_run(make_experiment(charlie.org), running=999, hello=1000, ready=1001)
    simulated = make_experiment(
        alice.org, model=make_model(alice.org, hf_repo="org/sim"), name="sim", engine="sim"
    )
    rented_run(simulated, running=1, hello=2, ready=3)

    (measured, sim) = cold_start_report(org=alice.org)
    assert (measured.gpu_type, measured.image_tag, measured.simulated, measured.runs) == (
        H100,
        "v0.11.0",
        False,
        3,
    )
    running = measured.spans["Pod running"]
    assert (running.runs, running.median, running.p90) == (3, 20.0, 36.0)  # 10, 20, 40
    weights = measured.spans["Weights download"]
    assert (weights.runs, weights.median, weights.p90) == (2, 150.0, 190.0)  # cached: not in
    # First token: agent ready + the weights' time + the engine's 51 s: 196, 306 and 126.1.
    token = measured.spans["First token"]
    assert (token.runs, token.median) == (3, 45 + 100.0 + 51)
    assert sim.simulated and sim.runs == 1

    client = signed_in(alice)
    page = client.get("/o/acme/reports/cold-starts/").content.decode()
    assert "Cold starts" in page and "Simulated cold starts" in page and "36.0" in page
    csv = client.get("/o/acme/reports/cold-starts/?csv=measured").content.decode()
    assert csv.splitlines()[0] == "GPU type,Image tag,Span from the pod request,Runs,Median s,p90 s"
    assert f"{H100},v0.11.0,Pod running,3,20.0,36.0" in csv
    assert "999" not in page and "999" not in csv
    assert signed_in(charlie).get("/o/acme/reports/cold-starts/").status_code == 404


@pytest.mark.parametrize(
    ("installed", "flagged"),
    [("0.12.1", True), ("0.11.0+cpu", False), ("0.11", False), (None, False), ("dev", False)],
)
def test_it_flags_a_vllm_other_than_the_tags(alice, installed, flagged):
    run = rented_run(make_experiment(alice.org), running=1, hello=2, ready=3)
    run.agent_info = {"vllm_version": installed}
    run.save(update_fields=["agent_info"])
    message = vllm_version_mismatch(run)
    assert bool(message) is flagged
    page = signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode()
    detail = alice.client().get(f"/api/v1/orgs/acme/runs/{run.id}/").json()
    assert detail["vllm_version_mismatch"] == message
    if flagged:
        assert "names vLLM 0.11.0, but the pod ran vLLM 0.12.1" in message and message in page
