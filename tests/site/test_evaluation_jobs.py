"""A run's job carries its experiment's evaluation (issue 38): the set's items as they were
when it started, or the pack; the judge by URL and model, its key only in the pod's
environment; simulated runs get no judge key."""

from __future__ import annotations

import base64
import uuid

import pytest
from django.core.files.base import ContentFile

from agents import protocol
from agents.evaluation import parse_evaluation_set
from runs.errors import DomainValidationError
from runs.models import Endpoint, EvaluationSet
from runs.run_as_started import job_spec_freeze
from runs.secrets import encrypt_secret
from runs.selectors.estimates import experiment_estimate
from runs.services import provisioning
from runs.services.evaluations import evaluation_set_upload
from runs.services.run_start import run_start

from .conftest import SYSTEM, make_experiment
from .test_evaluation_sets import JUDGED
from .test_run_as_started import RecordingProvider

pytestmark = pytest.mark.django_db

KEY = "sk-judge-secret-0123456789"


def judge_endpoint(org, base_url="http://127.0.0.1:9") -> Endpoint:
    return Endpoint.objects.create(
        organization=org,
        name="judge",
        base_url=base_url,
        served_model_name="judge-model",
        encrypted_api_key=encrypt_secret(KEY),
        api_key_fingerprint="abcd",
    )


def test_a_run_freezes_the_sets_items_and_later_edits_change_nothing(alice):
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="judged", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    experiment = make_experiment(
        alice.org, evaluation={"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    )
    job = protocol.JobSpec.model_validate(
        job_spec_freeze(experiment=experiment) | {"run_id": str(uuid.uuid4())} | _attempt()
    )
    evaluation = job.evaluation
    assert evaluation is not None and evaluation.pack is None
    assert parse_evaluation_set(evaluation.set_jsonl.encode()).summary()["needs_judge"]
    assert (evaluation.set_id, evaluation.set_sha256) == (str(uploaded.id), uploaded.sha256)
    assert evaluation.judge == protocol.EvaluationJudge(
        base_url="http://127.0.0.1:9", model="judge-model", endpoint_id=str(judge.id)
    )
    assert evaluation.concurrency == 4
    assert KEY not in str(job_spec_freeze(experiment=experiment))


def test_a_pack_travels_by_name_and_no_evaluation_leaves_the_job_as_it_was(alice):
    packed = make_experiment(alice.org, evaluation={"pack": "arithmetic", "concurrency": 2})
    frozen = job_spec_freeze(experiment=packed)
    assert frozen["evaluation"] == {"pack": "arithmetic", "concurrency": 2, "seed": 0}
    plain = make_experiment(alice.org, model=packed.model, name="plain")
    assert "evaluation" not in job_spec_freeze(experiment=plain)
    # Each configuration's evaluation is in the estimate: 80 items at 2 in flight.
    with_eval = experiment_estimate(experiment=packed)
    without = experiment_estimate(experiment=plain)
    assert with_eval.evaluation_seconds == pytest.approx(2 * 80 * 3.0 / 2)
    assert with_eval.total_seconds == pytest.approx(without.total_seconds + 240.0, abs=0.2)


def test_a_set_too_large_for_a_job_is_refused_by_field(alice):
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="big", raw=JUDGED)
    EvaluationSet.objects.filter(id=uploaded.id).update(
        size_bytes=protocol.MAX_JOB_EVALUATION_BYTES + 1
    )
    judge = judge_endpoint(alice.org)
    experiment = make_experiment(
        alice.org, evaluation={"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    )
    with pytest.raises(DomainValidationError) as refused:
        job_spec_freeze(experiment=experiment)
    assert "at most 65,536 bytes" in refused.value.fields["evaluation.set_id"][0]


def test_the_judges_key_reaches_the_pod_only_in_its_environment(alice, settings, monkeypatch):
    settings.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1"]
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="judged", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    experiment = make_experiment(
        alice.org, evaluation={"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    )
    run = run_start(actor=SYSTEM, experiment=experiment, reason="quality")
    # Edited after the start: the run scores what it was started with.
    uploaded.file.save(f"{alice.org.id}/edited.jsonl", ContentFile(b"{}"), save=True)
    recorder = RecordingProvider()
    monkeypatch.setattr(provisioning, "provider_for", lambda *, org, name: recorder)
    outcome = provisioning.run_provision(run_id=run.id, owner="w")
    run.refresh_from_db()
    assert outcome == "created", run.failure_reason
    (spec,) = recorder.specs
    assert spec.env[protocol.JUDGE_API_KEY_ENV] == KEY
    job_text = base64.b64decode(spec.env["BENCHSITE_JOB"]).decode()
    assert KEY not in job_text
    in_pod = protocol.JobSpec.model_validate_json(job_text)
    assert in_pod.evaluation.set_jsonl.encode() == JUDGED


def test_a_judge_at_a_refused_address_fails_the_run_naming_it(alice, settings, monkeypatch):
    settings.BENCHSITE_ENDPOINT_HOSTS = []
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="judged", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    experiment = make_experiment(
        alice.org, evaluation={"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    )
    run = run_start(actor=SYSTEM, experiment=experiment, reason="quality")
    recorder = RecordingProvider()
    monkeypatch.setattr(provisioning, "provider_for", lambda *, org, name: recorder)
    assert provisioning.run_provision(run_id=run.id, owner="w") == "failed"
    run.refresh_from_db()
    assert "judge endpoint's address is refused" in run.failure_reason and not recorder.specs


def _attempt() -> dict:
    return {"deadline": "2030-01-01T00:00:00Z"}
