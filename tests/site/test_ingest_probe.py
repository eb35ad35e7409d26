"""Reconcile judges silence against the site's own ability to hear (issue 14 item 5a): it
probes the address agents are given, gives no verdict while that does not answer, and once
it answers again counts every silence from that moment at the earliest."""

from __future__ import annotations

import datetime
import http.server
import sys
import threading
import uuid

import pytest
from django.utils import timezone

from runs.models import IngestProbe, Run
from runs.models.runs import RunState
from runs.providers.registry import local_provider
from runs.services import ingest_watch
from runs.services.ingest_watch import ingest_probe as real_ingest_probe
from runs.services.provisioning import run_provision
from runs.services.reconcile import AGENT_SILENCE, CANCEL_GRACE, runs_reconcile

from .conftest import frozen, make_experiment
from .live_server import free_port

pytestmark = pytest.mark.django_db

WAITING_AGENT = f"{sys.executable} -c 'import time; time.sleep(300)'"


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


class Site:
    """Something answering ``/healthz`` at a fixed port, started and stopped at will."""

    def __init__(self, port: int):
        self.port, self.server = port, None

    def up(self) -> None:
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Health)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def site(settings, monkeypatch, tmp_path):
    """The real probe, at the address agents are given; every run on the local provider."""
    monkeypatch.setattr(ingest_watch, "ingest_probe", real_ingest_probe)
    site = Site(free_port())
    settings.BENCHSITE_PUBLIC_URL = f"http://user:hunter2@127.0.0.1:{site.port}"
    settings.BENCHSITE_PROVIDER = "local"
    settings.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"
    settings.BENCHSITE_LOCAL_AGENT_COMMAND = WAITING_AGENT
    yield site
    site.down()
    provider = local_provider()
    for pod in provider.list_bench_pods():
        provider.terminate(pod.pod_id)


def running(org, heard: datetime.datetime) -> Run:
    run = Run.objects.create(
        organization=org,
        experiment=(started := make_experiment(org, name=f"e-{uuid.uuid4()}")),
        **frozen(started, budget_cap_usd="50"),
    )
    assert run_provision(run_id=run.id, owner="w") == "created"
    Run.objects.filter(id=run.id).update(state=RunState.BENCHMARKING, last_heartbeat_at=heard)
    return Run.objects.get(id=run.id)


def state(run: Run) -> str:
    run.refresh_from_db()
    return run.state


def test_it_calls_no_agent_silent_while_ingest_does_not_answer(alice, site):
    now = timezone.now()
    run = running(alice.org, heard=now)
    later = now + 10 * AGENT_SILENCE
    report = runs_reconcile(now=later)
    assert report.failed == [] and state(run) == "benchmarking"
    probe = IngestProbe.objects.get()
    assert probe.reachable_since is None and probe.unreachable_since == later
    assert probe.last_error == "ConnectError"  # not the address, nor what it holds
    # Nor is a cancel called unanswered: the agent cannot hear it either.
    Run.objects.filter(id=run.id).update(cancel_requested_at=now, cancel_reason="stop")
    assert runs_reconcile(now=later + 10 * CANCEL_GRACE).cancelled == []
    assert state(run) == "benchmarking"


def test_it_gives_agents_a_whole_window_once_ingest_is_back(alice, site, settings):
    settings.BENCHSITE_MAX_RESUMES = 0  # resume off: what a run with none left does
    now = timezone.now()
    run = running(alice.org, heard=now)
    back = now + 10 * AGENT_SILENCE
    runs_reconcile(now=back - datetime.timedelta(seconds=30))  # down
    site.up()
    assert runs_reconcile(now=back).failed == []  # just back: counted from here
    assert IngestProbe.objects.get().reachable_since == back
    almost = back + AGENT_SILENCE - datetime.timedelta(seconds=1)
    assert runs_reconcile(now=almost).failed == [] and state(run) == "benchmarking"
    # Still nothing from the agent a whole window after the site was back: silent for real.
    report = runs_reconcile(now=back + AGENT_SILENCE + datetime.timedelta(seconds=1))
    assert report.failed == [str(run.id)] and state(run) == "failed"


def test_it_judges_silence_as_before_while_ingest_has_been_up_all_along(alice, site, settings):
    settings.BENCHSITE_MAX_RESUMES = 0  # resume off: what a run with none left does
    site.up()
    now = timezone.now()
    run = running(alice.org, heard=now)
    for moment in (now, now + AGENT_SILENCE / 2):  # passes as beat sends them
        assert runs_reconcile(now=moment).failed == []
    report = runs_reconcile(now=now + AGENT_SILENCE + datetime.timedelta(seconds=1))
    assert report.failed == [str(run.id)]
    assert "fell silent" in Run.objects.get(id=run.id).failure_reason


def test_it_counts_a_gap_nobody_probed_as_an_outage(alice, site):
    """A reconcile that did not run (worker or beat stopped, the whole site restarted) cannot
    vouch for that time: ingest counts as just back."""
    site.up()
    now = timezone.now()
    run = running(alice.org, heard=now)
    runs_reconcile(now=now)
    resumed = now + 3 * AGENT_SILENCE
    assert runs_reconcile(now=resumed).failed == [] and state(run) == "benchmarking"
    assert IngestProbe.objects.get().reachable_since == resumed
