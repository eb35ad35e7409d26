"""A site outage longer than the silence window loses nothing (issue 14 item 5), with real
processes: Daphne serving the site, a run on the local provider (``benchsite-agent run`` as a
process, the simulator as its engine), Daphne stopped while reconcile passes run here, then
started again on the same address."""

from __future__ import annotations

import datetime
import json

import pytest
from django.utils import timezone

from runs.models import AgentMessageRecord, Measurement, Run
from runs.models.runs import RunState
from runs.providers import local
from runs.providers.base import PodState, pod_name
from runs.providers.registry import local_provider
from runs.services import ingest_watch
from runs.services.ingest_watch import ingest_probe as real_ingest_probe
from runs.services.provisioning import run_provision
from runs.services.reconcile import AGENT_SILENCE, runs_reconcile
from tests.polling import wait_for

from .conftest import frozen, make_experiment, make_model
from .live_server import daphne_server, free_port
from .test_agent_runs import assert_site_holds_the_journal
from .test_celery_worker import broker_queue  # noqa: F401  (Daphne's tasks go to our queue)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]

# Long enough at 10x that a pass, a stop and a start of Daphne fit inside the run.
SIM_EXPERIMENT = {
    "engine": "sim",
    "engine_image_tag": "",
    "serve_grid": {"max_num_seqs": [8, 2]},
    "workload": {
        "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
        "concurrency": [1, 2, 4],
        "requests_per_level": 24,
    },
    "slos": {"ttft_ms": 2000},
}


@pytest.fixture
def site(settings, monkeypatch, tmp_path, broker_queue):  # noqa: F811
    """The address agents are given (one port, for Daphne before and after the outage),
    probed for real; pods run the real agent."""
    monkeypatch.setattr(ingest_watch, "ingest_probe", real_ingest_probe)
    monkeypatch.setattr(local, "STOP_GRACE_SECONDS", 1.0)
    port = free_port()
    settings.BENCHSITE_PUBLIC_URL = f"http://127.0.0.1:{port}"
    settings.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    settings.BENCHSITE_LOCAL_AGENT_COMMAND = ""  # this installation's agent
    settings.BENCHSITE_SIM_SPEED = 10
    settings.BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS = 300
    yield port
    provider = local_provider()
    provider.delivery_grace = 0  # nothing outlives the test
    for pod in provider.list_bench_pods():
        provider.terminate(pod.pod_id)


def start_run(org) -> Run:
    experiment = make_experiment(org, model=make_model(org), **SIM_EXPERIMENT)
    run = Run.objects.create(organization=org, experiment=experiment, **frozen(experiment))
    assert run_provision(run_id=run.id, owner="test") == "created"
    return Run.objects.get(id=run.id)


def journal(tmp_path, run: Run) -> list[dict]:
    path = tmp_path / "pods" / pod_name(run.id) / "run" / "messages.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def passes_through_the_outage(run: Run) -> datetime.datetime:
    """Reconcile passes every half window, for three windows of silence: none may end it."""
    now = timezone.now()
    for step in range(1, 7):
        report = runs_reconcile(now=now + step * AGENT_SILENCE / 2)
        assert report.failed == [] and report.cancelled == [], report
    run.refresh_from_db()
    assert run.state == RunState.BENCHMARKING
    return now + 7 * AGENT_SILENCE / 2


def ended(run: Run) -> bool:
    run.refresh_from_db()
    return run.state not in (RunState.BENCHMARKING, RunState.FINALIZING)


def assert_everything_arrived_once(run: Run, tmp_path) -> None:
    assert run.state == "succeeded", run.failure_reason
    messages = journal(tmp_path, run)
    assert messages and messages[-1]["type"] == "run_finished"
    # Stored once per (epoch, seq) however often they were sent; every level as computed.
    assert_site_holds_the_journal(run, messages)
    # Every fixed level of both trials (a level too close to call under the run's own noise
    # seed is measured again: an extension beside them).
    fixed = Measurement.objects.filter(trial__run=run, result__extension__isnull=True)
    assert fixed.count() == 6
    assert sorted(run.trials.values_list("outcome", flat=True)) == ["succeeded", "succeeded"]


@pytest.mark.usefixtures("sim_over_http")
def test_it_keeps_a_run_through_an_outage_longer_than_the_silence_window(alice, site, tmp_path):
    with daphne_server(port=site):
        run = start_run(alice.org)
        wait_for(lambda: Measurement.objects.filter(trial__run=run).exists(), 120, "a first level")
    # Daphne is down; the agent runs on and spools.
    back = passes_through_the_outage(run)
    assert not any(m["type"] == "run_finished" for m in journal(tmp_path, run))
    with daphne_server(port=site):
        # Just back: every agent gets a whole window from now before it can be called silent.
        assert runs_reconcile(now=back).failed == []
        wait_for(lambda: ended(run), 180, "the run to end")

        def pod_given_back() -> bool:
            # A pass gives the pod back: its agent, asked to stop, exits once it has said
            # everything (on a busy machine later than the provider's first look; the next
            # pass tidies up what has exited).
            runs_reconcile(now=back)
            return local_provider().list_bench_pods() == []

        wait_for(pod_given_back, 60, "the pod to be given back", every=0.5)
    assert_everything_arrived_once(run, tmp_path)


@pytest.mark.usefixtures("sim_over_http")
def test_an_agent_that_finished_during_the_outage_delivers_once_the_site_is_back(
    alice, site, tmp_path
):
    with daphne_server(port=site):
        run = start_run(alice.org)
        wait_for(lambda: Measurement.objects.filter(trial__run=run).exists(), 120, "a first level")
    back = passes_through_the_outage(run)
    wait_for(
        lambda: any(m["type"] == "run_finished" for m in journal(tmp_path, run)),
        180,
        "the agent to finish its run",
    )
    delivered = AgentMessageRecord.objects.filter(run=run).count()
    assert delivered < len(journal(tmp_path, run))  # the rest waits in its spool
    # Stopping its pod now (as the end of a run does) must not kill an agent that only
    # delivers: it is asked, and left its grace.
    provider = local_provider()
    provider.terminate(pod_name(run.id))
    assert provider.status(pod_name(run.id)).state is PodState.RUNNING
    with daphne_server(port=site):
        assert runs_reconcile(now=back).failed == []
        wait_for(lambda: ended(run), 180, "the spool to arrive")
        # Delivered, it exits by itself; the next terminate only tidies up.
        wait_for(
            lambda: provider.status(pod_name(run.id)).state is PodState.EXITED,
            60,
            "the agent to exit",
        )
    assert_everything_arrived_once(run, tmp_path)
