"""Rows reached through a run (trials, measurements, agent messages, level figures) carry the
run's organization, set by the service that creates them, and a read through another
organization's scope never sees them."""

from __future__ import annotations

import pytest

from agents import protocol
from runs.access import scoped
from runs.actors import Actor
from runs.models import (
    AgentMessageRecord,
    Measurement,
    Membership,
    Run,
    Trial,
    TrialLevelFigures,
)
from runs.models.runs import RunState
from runs.selectors.trial_figures import trial_figures
from runs.services.ingest import agent_messages_ingest
from runs.services.level_figures import trial_level_figures_record
from runs.services.run_lifecycle import run_fail
from runs.services.run_start import run_start

from .conftest import make_experiment, make_model

pytestmark = pytest.mark.django_db

GRID = {"max_num_seqs": [64, 128]}  # two trials
RESULT = {"completed": 100, "failed": 0, "duration": 12.5, "output_throughput": 1024.0}
TENANT_ROWS = (Trial, Measurement, AgentMessageRecord, TrialLevelFigures)


def started_run(person) -> Run:
    experiment = make_experiment(person.org, model=make_model(person.org), serve_grid=GRID)
    return run_start(actor=Actor(user=person.user, via="api"), experiment=experiment)


def agent_sends(run: Run) -> None:
    """One measured, succeeded trial of ``run``, as its agent reports it."""
    sent = [
        {"type": "hello", "agent_version": "0.1.0", "host": {"hostname": "pod", "gpus": []}},
        {
            "type": "trial_started",
            "trial": 0,
            "serve_config": {"max_num_seqs": 64},
            "command": ["vllm", "serve", "m"],
        },
        {"type": "measurement", "trial": 0, "level": {"concurrency": 8}, "result": RESULT},
        {"type": "trial_finished", "trial": 0, "outcome": "succeeded"},
    ]
    messages = [
        protocol.parse_agent_message({**fields, "run_id": str(run.id), "seq": seq})
        for seq, fields in enumerate(sent)
    ]
    outcomes = agent_messages_ingest(run_id=run.id, messages=messages)
    assert all(outcome.stored for outcome in outcomes)


def owners(model, run: Run) -> set:
    run_path = "trial__run" if model in (Measurement, TrialLevelFigures) else "run"
    return set(model.objects.filter(**{run_path: run}).values_list("organization_id", flat=True))


def membership_of(person) -> Membership:
    return Membership.objects.get(user=person.user, organization=person.org)


def test_it_files_what_an_agent_sends_under_its_runs_organization(alice, charlie):
    runs = {person.org.id: started_run(person) for person in (alice, charlie)}
    for run in runs.values():
        agent_sends(run)
    for org_id, run in runs.items():
        for model in (Trial, Measurement, AgentMessageRecord):
            assert owners(model, run) == {org_id}, model.__name__


def test_it_files_the_trials_an_ended_run_never_ran_under_its_organization(alice):
    run = started_run(alice)
    assert run_fail(run_id=run.id, reason="Could not rent a pod: no key")
    assert Trial.objects.filter(run=run, outcome="skipped").count() == 2
    assert owners(Trial, run) == {alice.org.id}


def test_it_files_level_figures_under_their_trials_organization(alice, charlie):
    for person in (alice, charlie):
        run = started_run(person)
        agent_sends(run)
        Run.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED)
        assert trial_level_figures_record(run_ids=[run.id]) == 1
        assert owners(TrialLevelFigures, run) == {person.org.id}


def test_it_hides_other_tenants_trials_levels_messages_and_figures(alice, charlie):
    run = started_run(alice)
    agent_sends(run)
    Run.objects.filter(pk=run.pk).update(state=RunState.SUCCEEDED)
    trial_level_figures_record(run_ids=[run.id])
    for model in TENANT_ROWS:
        assert scoped(membership_of(alice), model).exists(), model.__name__
        assert not scoped(membership_of(charlie), model).exists(), model.__name__
    assert [figure.run_id for figure in trial_figures(org=alice.org)] == [run.id]
    assert trial_figures(org=charlie.org) == []
