"""vLLM version as an axis (issue 17), its rules one by one: the experiment's image tags are
checked like every other field, a run's trials are every tag × the grid, a pod runs one tag's
trials, the estimate counts a pod per tag, ``--image-tag`` runs one image only, and a run moves
to its next image only when its pod finished and budget is left. The whole path through the
fake Runpod API is ``test_runpod_image_tags``."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pytest
from django.utils import timezone

from agents import protocol
from runs.models import AuditEvent, Run, Trial
from runs.models.runs import RunState
from runs.run_as_started import job_spec_for_attempt, run_planned_trials
from runs.selectors.estimates import experiment_estimate
from runs.services.ingest import agent_messages_ingest
from runs.services.provisioning import run_provision

from .conftest import experiment_payload, frozen, make_experiment, make_model

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("waiting_local_pods")]

GRID = {"max_num_seqs": [64, 128]}


def create(alice, **fields):
    model = make_model(alice.org)
    return alice.client().post(
        "/api/v1/orgs/acme/experiments/",
        experiment_payload(model.id, **({"serve_grid": GRID} | fields)),
        format="json",
    )


def test_an_experiment_lists_image_tags_and_its_trials_are_every_tag_times_the_grid(alice):
    response = create(alice, compare_image_tags=["v0.12.0", "v0.13.0"])
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["compare_image_tags"] == ["v0.12.0", "v0.13.0"]
    assert body["trials"] == 6  # 3 images × 2 configurations


@pytest.mark.parametrize(
    ("tags", "field", "words"),
    [
        (["v0.11.0"], "compare_image_tags[0]", "the experiment's own image tag"),
        (["v0.12.0", "v0.12.0"], "compare_image_tags[1]", "listed twice"),
        (["bad tag!"], "compare_image_tags[0]", "Not a valid image tag"),
        (["a", "b", "c", "d"], "compare_image_tags", "no more than 3"),
        ("v0.12.0", "compare_image_tags", "list"),
    ],
)
def test_bad_image_tags_are_refused_naming_the_field(alice, tags, field, words):
    response = create(alice, compare_image_tags=tags)
    assert response.status_code == 400
    errors = response.json()["error"]["fields"]
    assert words in " ".join(errors[field]), errors


def test_the_grid_must_run_on_every_image_it_is_compared_on(alice):
    # --swap-space is gone from vLLM 0.18: fine on the experiment's v0.11.0, not on v0.18.0.
    response = create(
        alice, serve_grid={"swap_space": [4.0]}, compare_image_tags=["v0.12.0", "v0.18.0"]
    )
    assert response.status_code == 400
    errors = response.json()["error"]["fields"]
    assert list(errors) == ["compare_image_tags[1]"]
    assert "On v0.18.0: serve_grid.swap_space" in errors["compare_image_tags[1]"][0]
    assert "removed in vLLM 0.18.0" in errors["compare_image_tags[1]"][0]


def test_the_simulator_compares_no_images(alice):
    response = create(alice, engine="sim", compare_image_tags=["v0.12.0"])
    assert response.status_code == 400
    assert "simulator" in response.json()["error"]["fields"]["compare_image_tags"][0]


def test_the_frozen_job_runs_tag_major_and_each_pod_gets_one_tags_trials(alice):
    experiment = make_experiment(alice.org, serve_grid=GRID, compare_image_tags=["v0.12.0"])
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    assert [(t.image_tag, t.serve_config) for t in run_planned_trials(run)] == [
        ("v0.11.0", {"max_num_seqs": 64}),
        ("v0.11.0", {"max_num_seqs": 128}),
        ("v0.12.0", {"max_num_seqs": 64}),
        ("v0.12.0", {"max_num_seqs": 128}),
    ]
    report = protocol.ReportTo()
    deadline = timezone.now() + datetime.timedelta(hours=1)
    first = job_spec_for_attempt(run, deadline=deadline, report=report)
    assert (first.engine.image_tag, first.engine.vllm_version) == ("v0.11.0", "0.11.0")
    assert [trial.index for trial in first.trials] == [0, 1]
    # Trial 1 ended on the first pod, trial 0 not (lost with it): the first image is rerun.
    again = job_spec_for_attempt(run, deadline=deadline, report=report, skip_trials={1})
    assert [trial.index for trial in again.trials] == [0]
    second = job_spec_for_attempt(run, deadline=deadline, report=report, skip_trials={0, 1})
    assert (second.engine.image_tag, second.engine.vllm_version) == ("v0.12.0", "0.12.0")
    assert [trial.index for trial in second.trials] == [2, 3]


def test_a_single_image_job_reads_as_it_always_did(alice):
    experiment = make_experiment(alice.org, serve_grid=GRID)
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    job = job_spec_for_attempt(run, deadline=timezone.now(), report=protocol.ReportTo()).model_dump(
        mode="json"
    )
    # No per-trial image in the JSON: agents built before the axis read the job unchanged.
    assert all(set(trial) == {"index", "serve_config"} for trial in job["trials"])


def test_the_estimate_counts_a_pod_and_a_download_per_image(alice):
    one = make_experiment(alice.org, serve_grid=GRID)
    two = make_experiment(
        alice.org, model=one.model, name="two", serve_grid=GRID, compare_image_tags=["v0.12.0"]
    )
    alone, both = experiment_estimate(experiment=one), experiment_estimate(experiment=two)
    assert (alone.pods, both.pods) == (1, 2)
    assert (alone.trials, both.trials) == (2, 4)
    assert both.provisioning_seconds == pytest.approx(2 * alone.provisioning_seconds, abs=0.2)
    assert both.weights_download_seconds == pytest.approx(2 * alone.weights_download_seconds)
    # A network volume keeps the first pod's download for the next one.
    two.network_volume_id = "vol_1"
    on_volume = experiment_estimate(experiment=two)
    assert on_volume.weights_download_seconds == pytest.approx(alone.weights_download_seconds)


def test_a_run_started_on_one_image_runs_that_image_alone(alice):
    experiment = make_experiment(
        alice.org, serve_grid={"swap_space": [4.0]}, compare_image_tags=["v0.12.0"]
    )
    client = alice.client()
    url = "/api/v1/orgs/acme/runs/"
    started = client.post(
        url, {"experiment": str(experiment.id), "image_tag": "v0.13.0"}, format="json"
    )
    assert started.status_code == 201, started.json()
    run = Run.objects.get(id=started.json()["id"])
    assert {t.image_tag for t in run_planned_trials(run)} == {"v0.13.0"}
    assert len(run.job_spec["trials"]) == 1
    # An image the grid cannot run on is refused before anything is rented.
    refused = client.post(
        url, {"experiment": str(experiment.id), "image_tag": "v0.18.0"}, format="json"
    )
    assert refused.status_code == 400
    assert "swap_space" in refused.json()["error"]["fields"]["image_tag"][0]


class Agent:
    """Sends one pod's messages in order, in the epoch the site issued it."""

    def __init__(self, run: Run):
        run.refresh_from_db()
        self.run, self.seq, self.epoch = run, 0, run.agent_epoch

    def send(self, type_: str, **fields) -> None:
        message = protocol.parse_agent_message(
            {
                "type": type_,
                "run_id": str(self.run.id),
                "epoch": self.epoch,
                "seq": self.seq,
                **fields,
            }
        )
        self.seq += 1
        (outcome,) = agent_messages_ingest(run_id=self.run.id, messages=[message])
        assert outcome.refused is None, outcome.refused

    def finish_trials(self, *indices: int, run_outcome: str = "succeeded") -> None:
        for index in indices:
            self.send("trial_started", trial=index, serve_config={}, command=["vllm"])
            self.send("trial_finished", trial=index, outcome="succeeded")
        self.send("run_finished", outcome=run_outcome)


def two_image_run(alice, *, budget_cap_usd="50") -> Run:
    experiment = make_experiment(
        alice.org,
        model=make_model(alice.org),
        name=f"e-{uuid.uuid4()}",
        serve_grid=GRID,
        compare_image_tags=["v0.12.0"],
    )
    run = Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        **frozen(experiment, budget_cap_usd=budget_cap_usd),
    )
    assert run_provision(run_id=run.id, owner="w") == "created"
    return Run.objects.get(id=run.id)


def test_a_finished_pod_moves_the_run_to_its_next_image_and_its_agent_is_shut_out(
    alice, django_capture_on_commit_callbacks
):
    run = two_image_run(alice)
    assert run.pod_image_tag == "v0.11.0"
    first_pod = run.pod_id
    with django_capture_on_commit_callbacks() as callbacks:
        Agent(run).finish_trials(0, 1)
    assert len(callbacks) == 2  # the left pod's release, then the next pod's provisioning
    run.refresh_from_db()
    assert (run.state, run.pod_id, run.pod_attempt, run.resumes) == (
        RunState.PROVISIONING,
        "",
        1,
        0,
    )
    assert [pod["pod_id"] for pod in run.pod_history] == [first_pod]
    assert AuditEvent.objects.filter(event="run.next_image", target_id=str(run.id)).exists()
    assert dict(Trial.objects.filter(run=run).values_list("index", "image_tag")) == {
        0: "v0.11.0",
        1: "v0.11.0",
    }
    # The next pod: the second image, under the next name; the first pod's agent is done.
    assert run_provision(run_id=run.id, owner="w") == "created"
    run.refresh_from_db()
    assert run.pod_image_tag == "v0.12.0" and run.pod_name.endswith("-r1")
    old = protocol.parse_agent_message(
        {"type": "heartbeat", "run_id": str(run.id), "epoch": 0, "seq": 99}
    )
    (refused,) = agent_messages_ingest(run_id=run.id, messages=[old])
    assert refused.refused and "has left" in refused.refused
    run.agent_epoch += 1  # as POST agent/runs/<id>/epoch/ issues the next pod's agent
    run.save(update_fields=["agent_epoch"])
    Agent(run).finish_trials(2, 3)
    run.refresh_from_db()
    assert run.state == RunState.SUCCEEDED
    assert dict(Trial.objects.filter(run=run).values_list("index", "image_tag")) == {
        0: "v0.11.0",
        1: "v0.11.0",
        2: "v0.12.0",
        3: "v0.12.0",
    }


def test_a_failed_pod_ends_the_run_and_its_later_image_is_not_rented(alice):
    run = two_image_run(alice)
    Agent(run).finish_trials(0, 1, run_outcome="failed")
    run.refresh_from_db()
    assert (run.state, run.pod_attempt) == (RunState.FAILED, 0)
    skipped = Trial.objects.filter(run=run, index__in=[2, 3])
    assert {(t.outcome, t.image_tag) for t in skipped} == {("skipped", "v0.12.0")}


def test_no_next_image_when_the_budget_is_spent(alice):
    run = two_image_run(alice, budget_cap_usd="0.01")
    # The pod has been billed for an hour by now: the cap is spent.
    Run.objects.filter(id=run.id).update(
        pod_started_at=timezone.now() - datetime.timedelta(hours=1), price_usd_hr=Decimal("2")
    )
    Agent(run).finish_trials(0, 1)
    run.refresh_from_db()
    assert (run.state, run.pod_attempt) == (RunState.FAILED, 0)
    assert "budget cap ($0.01) was spent before the trials on v0.12.0" in run.failure_reason
    assert Trial.objects.get(run=run, index=2).outcome == "skipped"
