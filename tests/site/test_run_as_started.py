"""A run does what it was started with: its frozen job (``runs.run_as_started``), whatever its
experiment became since; the migration gives runs started before it their frozen job."""

from __future__ import annotations

import base64
import datetime
import importlib
from decimal import Decimal

import pytest
from django.apps import apps
from django.utils import timezone
from rest_framework.test import APIClient

from agents import protocol
from runs.models import Run
from runs.pod_job import DEADLINE_SLACK, ESTIMATE_FACTOR
from runs.providers.base import PodInfo, PodSpec, PodState
from runs.run_as_started import job_spec_freeze
from runs.services import provisioning
from runs.services.experiments import experiment_update
from runs.services.run_start import run_start

from .conftest import SYSTEM, WORKLOAD, make_experiment

pytestmark = pytest.mark.django_db

backfill = importlib.import_module("runs.migrations.0014_run_frozen_job").frozen_job_backfill


class RecordingProvider:
    """A provider that rents nothing and keeps every pod it was asked for."""

    def __init__(self):
        self.specs: list[PodSpec] = []

    def find_by_name(self, name: str) -> PodInfo | None:
        return None

    def create(self, spec: PodSpec) -> PodInfo:
        self.specs.append(spec)
        return PodInfo(pod_id="pod-1", name=spec.name, state=PodState.RUNNING)


def _without_attempt(job: protocol.JobSpec) -> dict:
    return job.model_dump(mode="json", exclude={"deadline", "report"})


def test_it_runs_what_was_started_after_the_experiment_is_edited(alice, monkeypatch):
    experiment = make_experiment(alice.org)
    run = run_start(actor=SYSTEM, experiment=experiment, reason="nightly")
    experiment_update(
        experiment=experiment,
        actor=SYSTEM,
        serve_grid={"max_num_seqs": [16, 32, 256]},
        workload=WORKLOAD | {"concurrency": [2, 4]},
        slos={"ttft_ms": 900},
        engine_image_tag="v0.12.0",
        gpu_count=2,
        budget_cap_usd=Decimal(1),
    )
    recorder = RecordingProvider()
    monkeypatch.setattr(provisioning, "provider_for", lambda *, org, name: recorder)
    before = timezone.now()
    assert provisioning.run_provision(run_id=run.id, owner="w") == "created"

    (spec,) = recorder.specs
    in_pod = protocol.JobSpec.model_validate_json(base64.b64decode(spec.env["BENCHSITE_JOB"]))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {spec.env['BENCHSITE_TOKEN']}")
    response = client.get(f"/api/v1/agent/runs/{run.id}/job/")
    assert response.status_code == 200, response.content
    served = protocol.JobSpec.model_validate(response.json())
    assert _without_attempt(served) == _without_attempt(in_pod)
    # Exactly the experiment as it was started: its grid, workload, SLOs, image and GPUs.
    assert [t.serve_config for t in in_pod.trials] == [{"max_num_seqs": 64}, {"max_num_seqs": 128}]
    assert in_pod.workload == protocol.Workload.model_validate(WORKLOAD)
    assert in_pod.slos == protocol.Slos(ttft_ms=500)
    assert (in_pod.engine.image_tag, in_pod.engine.vllm_version) == ("v0.11.0", "0.11.0")
    assert in_pod.engine.gpu_count == spec.gpu_count == 1
    assert spec.image.endswith(":v0.11.0")
    # The deadline is the started estimate's (twice it, plus the slack): the edited $1 cap
    # at $3.99/GPU-hour for 2 GPUs would have cut it to about 7.5 minutes.
    started = ESTIMATE_FACTOR * run.experiment_snapshot["estimate_seconds"]
    expected = datetime.timedelta(seconds=started) + DEADLINE_SLACK
    assert expected > datetime.timedelta(hours=float(Decimal(1) / (2 * Decimal("3.99"))))
    assert before + expected <= in_pod.deadline <= timezone.now() + expected


def test_the_migration_gives_a_run_its_frozen_job_from_its_snapshot(alice):
    experiment = make_experiment(alice.org, fallback_gpu_types=[], budget_cap_usd=Decimal(50))
    # A snapshot as runs stored it before the frozen job, without the later placement keys.
    old = Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        experiment_snapshot={
            "name": experiment.name,
            "model": str(experiment.model_id),
            "gpu_type": experiment.gpu_type_id,
            "gpu_count": 1,
            "cloud_type": "secure",
            "engine": "vllm",
            "engine_image_tag": "v0.11.0",
            "serve_grid": experiment.serve_grid,
            "workload": experiment.workload,
            "slos": experiment.slos,
            "budget_cap_usd": "50.00",
            "estimate_usd": "1.20",
            "estimate_seconds": 900.0,
        },
    )
    # Runs from before the traffic seed (migration 0016) have none: they read as seed 0.
    expected_job = job_spec_freeze(experiment=experiment)
    expected_job.pop("seed")
    experiment_update(experiment=experiment, actor=SYSTEM, serve_grid={"max_num_seqs": [8]})

    backfill(apps, None)

    old.refresh_from_db()
    assert old.job_spec == expected_job  # the snapshot's grid, not the edited one
    assert old.experiment_snapshot == {
        "name": experiment.name,
        "model": str(experiment.model_id),
        "cloud_type": "secure",
        "fallback_gpu_types": [],
        "allow_other_cloud": experiment.allow_other_cloud,
        "container_disk_gb": experiment.container_disk_gb,
        "network_volume_id": experiment.network_volume_id,
        "budget_cap_usd": "50.00",
        "estimate_usd": "1.20",
        "estimate_seconds": 900.0,
    }


def test_the_migration_leaves_a_run_that_has_its_frozen_job(alice):
    experiment = make_experiment(alice.org)
    run = run_start(actor=SYSTEM, experiment=experiment)
    frozen = (run.job_spec, run.experiment_snapshot)
    backfill(apps, None)
    run.refresh_from_db()
    assert (run.job_spec, run.experiment_snapshot) == frozen
