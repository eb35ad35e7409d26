"""Every trial settles truthfully when its run ends, by whichever path (issue 14 item 4), and
an ended run's agent may still deliver for the grace (item 5b): the agent's own
``run_finished``, a cancel, reconcile's verdicts, the budget stop, a failed provisioning."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from agents import protocol
from runs.actors import Actor
from runs.models import ModelSpec, Run, Trial, TrialLevelFigures
from runs.models.runs import RunState
from runs.selectors.trial_figures import trial_figures
from runs.services.ingest import agent_messages_ingest
from runs.services.provisioning import run_provision
from runs.services.reconcile import runs_reconcile
from runs.services.run_control import run_cancel
from runs.services.run_lifecycle import run_fail
from runs.services.run_tokens import run_token_issue

from .conftest import frozen, make_experiment, make_model

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("waiting_local_pods")]

RESULT = {"completed": 100, "failed": 0, "duration": 12.5, "output_throughput": 1024.0}
GRID = {"max_num_seqs": [64, 128]}  # two trials
WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
    "concurrency": [1, 8, 64],
    "requests_per_level": 100,
}


def _run(org, *, pod: bool = True) -> Run:
    model = ModelSpec.objects.filter(organization=org).first() or make_model(org)
    experiment = make_experiment(
        org, model=model, name=f"e-{uuid.uuid4()}", serve_grid=GRID, workload=WORKLOAD
    )
    run = Run.objects.create(
        organization=org,
        experiment=experiment,
        **frozen(experiment, budget_cap_usd="50"),
    )
    if pod:
        assert run_provision(run_id=run.id, owner="w") == "created"
    return Run.objects.get(id=run.id)


class Agent:
    """Sends one run's messages in order, numbering them."""

    def __init__(self, run: Run):
        self.run, self.seq = run, 0

    def send(self, type_: str, **fields) -> list:
        message = protocol.parse_agent_message(
            {"type": type_, "run_id": str(self.run.id), "seq": self.seq, **fields}
        )
        self.seq += 1
        return agent_messages_ingest(run_id=self.run.id, messages=[message])

    def hello(self):
        return self.send("hello", agent_version="0.1.0", host={"hostname": "pod", "gpus": []})

    def start(self, trial: int):
        return self.send(
            "trial_started",
            trial=trial,
            serve_config={"max_num_seqs": GRID["max_num_seqs"][trial]},
            command=["vllm", "serve", "m"],
        )

    def level(self, trial: int, concurrency: int):
        return self.send(
            "measurement", trial=trial, level={"concurrency": concurrency}, result=RESULT
        )


def trials_of(run: Run) -> list[tuple]:
    return [
        (t.index, t.outcome, t.measurements.count())
        for t in Trial.objects.filter(run=run).order_by("index")
    ]


def test_it_reports_a_cancelled_trial_with_two_measured_levels_partial_not_skipped(alice):
    run = _run(alice.org)
    agent = Agent(run)
    agent.hello()
    agent.start(0)
    agent.level(0, 1)
    agent.level(0, 8)
    run_cancel(actor=Actor(user=alice.user, via="web"), run=run, reason="enough")
    # What the agent says of a trial a cancel cut short, and of the one it never began.
    agent.send("trial_finished", trial=0, outcome="skipped", log_tail="cancelled: enough")
    agent.send("trial_finished", trial=1, outcome="skipped", log_tail="not run: enough")
    agent.send("run_finished", outcome="cancelled", reason="cancelled: enough")
    run.refresh_from_db()
    assert run.state == "cancelled"
    assert trials_of(run) == [(0, "partial", 2), (1, "skipped", 0)]
    assert Trial.objects.get(run=run, index=0).log_tail == "cancelled: enough"


def test_it_leaves_no_trial_running_when_reconcile_fails_a_silent_agent(alice, settings):
    settings.BENCHSITE_MAX_RESUMES = 0  # resume off: what a run with none left does
    run = _run(alice.org)
    agent = Agent(run)
    agent.hello()
    agent.start(0)
    agent.level(0, 1)  # then the agent is killed: nothing more arrives
    report = runs_reconcile(now=timezone.now() + datetime.timedelta(minutes=10))
    run.refresh_from_db()
    assert str(run.id) in report.failed and run.state == "failed"
    assert trials_of(run) == [(0, "partial", 1), (1, "skipped", 0)]
    partial, never = Trial.objects.filter(run=run).order_by("index")
    assert "fell silent" in partial.log_tail and partial.finished_at == run.finished_at
    assert never.log_tail.startswith("not run: The agent fell silent")
    assert never.serve_config == {"max_num_seqs": 128}


def test_it_settles_the_trials_of_a_run_stopped_at_its_budget_cap(alice):
    run = _run(alice.org)
    agent = Agent(run)
    agent.hello()
    agent.start(0)  # starting its engine: nothing measured yet
    Run.objects.filter(id=run.id).update(
        price_usd_hr=Decimal("3.00"),
        pod_started_at=timezone.now() - datetime.timedelta(hours=20),
        last_heartbeat_at=timezone.now(),
    )
    report = runs_reconcile()
    run.refresh_from_db()
    assert str(run.id) in report.over_budget
    assert trials_of(run) == [(0, "skipped", 0), (1, "skipped", 0)]
    assert Trial.objects.get(run=run, index=0).log_tail.startswith("stopped: Stopped at the")


def test_it_settles_the_planned_trials_of_a_run_that_never_got_a_pod(alice):
    run = _run(alice.org, pod=False)
    assert run_fail(run_id=run.id, reason="Could not rent a pod: no key")
    assert trials_of(run) == [(0, "skipped", 0), (1, "skipped", 0)]
    queued = _run(alice.org, pod=False)
    run_cancel(actor=Actor(user=alice.user, via="web"), run=queued, reason="wrong grid")
    assert trials_of(queued) == [(0, "skipped", 0), (1, "skipped", 0)]
    assert Trial.objects.get(run=queued, index=1).log_tail == "not run: wrong grid"


def test_it_settles_a_trial_the_agent_left_running_when_it_reports_its_own_end(alice):
    run = _run(alice.org)
    agent = Agent(run)
    agent.hello()
    agent.start(0)
    agent.level(0, 1)
    agent.send("run_finished", outcome="failed", reason="agent error: HttpError")
    run.refresh_from_db()
    assert run.state == "failed"
    assert trials_of(run) == [(0, "partial", 1), (1, "skipped", 0)]
    # A partial trial's levels count in the reports; a skipped one has none to count.
    assert [f.trial_index for f in trial_figures(org=alice.org)] == [0]


def test_an_ended_run_takes_its_agents_late_results_for_the_grace_and_keeps_its_end(
    alice, settings
):
    settings.BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS = 300
    run = _run(alice.org)
    agent = Agent(run)
    agent.hello()
    agent.start(0)
    agent.level(0, 1)
    assert run_fail(run_id=run.id, reason="Stopped at the budget cap ($50).", state="over_budget")
    run.refresh_from_db()
    ended = (run.state, run.finished_at, run.failure_reason)
    assert trials_of(run) == [(0, "partial", 1), (1, "skipped", 0)]
    # What the agent spooled before it heard of the end arrives now: stored, and the trial
    # is what the agent says it was; the run's end stands.
    [outcome] = agent.level(0, 8)
    assert outcome.stored and outcome.refused is None
    agent.level(0, 64)
    agent.send("trial_finished", trial=0, outcome="succeeded")
    agent.send("run_finished", outcome="succeeded")
    run.refresh_from_db()
    assert (run.state, run.finished_at, run.failure_reason) == ended
    assert trials_of(run) == [(0, "succeeded", 3), (1, "skipped", 0)]
    assert TrialLevelFigures.objects.filter(trial__run=run, trial__index=0).exists()
    # After the grace nothing new is taken.
    Run.objects.filter(id=run.id).update(
        finished_at=timezone.now() - datetime.timedelta(seconds=301)
    )
    [late] = agent.level(1, 1)
    assert not late.stored and "has ended" in late.refused
    assert trials_of(run) == [(0, "succeeded", 3), (1, "skipped", 0)]


def test_a_run_token_delivers_for_the_grace_after_the_end_and_is_refused_after(alice, settings):
    settings.BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS = 300
    run = _run(alice.org, pod=False)
    token = run_token_issue(run=run)
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    url = f"/api/v1/agent/runs/{run.id}/messages/"
    hello = {
        "type": "hello",
        "run_id": str(run.id),
        "seq": 0,
        "agent_version": "0.1.0",
        "host": {"hostname": "pod", "gpus": []},
    }
    run_fail(run_id=run.id, reason="The agent fell silent (last heard 10:00:00 UTC).")
    response = agent.post(url, {"messages": [hello]}, format="json")
    assert response.status_code == 200, response.content
    # Stored, and told to stop: the run is over, only delivery is left.
    assert response.json()["acked"] == [0]
    assert response.json()["cancel"] == {"type": "cancel", "reason": "the run has ended (failed)"}
    # Delivery only: the job is not handed out for an ended run.
    assert agent.get(f"/api/v1/agent/runs/{run.id}/job/").status_code == 401
    Run.objects.filter(id=run.id).update(
        finished_at=timezone.now() - datetime.timedelta(seconds=301)
    )
    response = agent.post(url, {"messages": [{**hello, "seq": 1}]}, format="json")
    assert response.status_code == 401
    assert Run.objects.get(id=run.id).state == RunState.FAILED
