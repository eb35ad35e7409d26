"""A run's job carries its experiment's evaluation (issue 38): the uploaded set by id and
digest (its agent fetches the file by route, whatever its size, and only its own run's set),
or the pack; the judge by URL and model, its key only in the pod's environment; simulated
runs get no judge key; a set a run under way carries is not deleted."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid

import pytest
from django.core.files.base import ContentFile
from rest_framework.test import APIClient

from agents import protocol
from agents.evaluation import parse_evaluation_set
from runs.errors import Conflict
from runs.models import Endpoint, EvaluationSet, Run
from runs.models.runs import RunState
from runs.run_as_started import job_spec_freeze
from runs.secrets import encrypt_secret
from runs.selectors.estimates import experiment_estimate
from runs.services import provisioning
from runs.services.evaluations import evaluation_set_delete, evaluation_set_upload
from runs.services.run_start import run_start
from runs.services.run_tokens import run_token_issue

from .conftest import SYSTEM, make_experiment
from .test_evaluation_sets import JUDGED, NOT_FOUND
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


def test_a_run_names_the_set_by_id_and_digest_and_the_judge_by_address(alice):
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="judged", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    experiment = make_experiment(
        alice.org, evaluation={"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    )
    job = protocol.JobSpec.model_validate(
        job_spec_freeze(experiment=experiment) | {"run_id": str(uuid.uuid4())} | _attempt()
    )
    evaluation = job.evaluation
    assert evaluation is not None and evaluation.pack is None and evaluation.fetched
    assert evaluation.set_jsonl is None
    assert (evaluation.set_id, evaluation.set_sha256) == (
        str(uploaded.id),
        hashlib.sha256(JUDGED).hexdigest(),
    )
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


def large_set(items: int = 60) -> bytes:
    """A set larger than a job may carry whole: ``items`` long prompts."""
    lines = [json.dumps({"set": {"scorer": {"kind": "exact"}}})]
    lines += [
        json.dumps({"id": f"q{i}", "prompt": "word " * 240 + f"Say {i}", "reference": str(i)})
        for i in range(items)
    ]
    return ("\n".join(lines) + "\n").encode()


def agent_client(run: Run) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {run_token_issue(run=run)}")
    return client


def set_url(run: Run, set_id) -> str:
    """The route the agent builds (``agents.runner.session``), on this site."""
    return protocol.agent_route(
        "/" + protocol.API_BASE_ROUTE,
        protocol.AGENT_EVALUATION_SET_ROUTE,
        run_id=run.id,
        set_id=set_id,
    )


def test_a_set_over_64_kib_starts_and_its_agent_gets_it_as_uploaded(alice):
    raw = large_set()
    assert len(raw) > protocol.MAX_JOB_EVALUATION_BYTES
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="big", raw=raw)
    other = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="other", raw=raw)
    experiment = make_experiment(alice.org, evaluation={"set_id": str(uploaded.id)})
    run = run_start(actor=SYSTEM, experiment=experiment, reason="quality")
    frozen = protocol.EvaluationJob.model_validate(run.job_spec["evaluation"])
    assert (frozen.set_id, frozen.set_sha256) == (str(uploaded.id), uploaded.sha256)
    assert len(json.dumps(run.job_spec)) < protocol.MAX_JOB_EVALUATION_BYTES
    agent = agent_client(run)
    response = agent.get(set_url(run, uploaded.id))
    assert response.status_code == 200 and response["Content-Type"] == "application/jsonl"
    served = b"".join(response.streaming_content)
    assert served == raw and hashlib.sha256(served).hexdigest() == frozen.set_sha256
    assert parse_evaluation_set(served).summary()["items"] == 60
    # Another set of the organization, or none at all: the same 404.
    for missing in (other.id, uuid.uuid4()):
        refused = agent.get(set_url(run, missing))
        assert refused.status_code == 404 and refused.json() == NOT_FOUND


def test_only_the_runs_own_token_fetches_its_set(alice, charlie):
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="big", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    evaluation = {"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    experiment = make_experiment(alice.org, evaluation=evaluation)
    run = run_start(actor=SYSTEM, experiment=experiment, reason="quality")
    plain = run_start(
        actor=SYSTEM,
        experiment=make_experiment(alice.org, model=experiment.model, name="plain"),
        reason="no set",
    )
    theirs = run_start(
        actor=SYSTEM, experiment=make_experiment(charlie.org, name="theirs"), reason="other org"
    )
    # A run that names no set, or another organization's run, gets nothing of it.
    assert agent_client(plain).get(set_url(plain, uploaded.id)).status_code == 404
    assert agent_client(theirs).get(set_url(theirs, uploaded.id)).status_code == 404
    # Another run's token on this run's route: refused as every agent route refuses it.
    stranger = agent_client(plain).get(set_url(run, uploaded.id))
    assert stranger.status_code == 401
    # A user's token is not a run token.
    user = APIClient()
    user.credentials(HTTP_AUTHORIZATION=f"Bearer {alice.token}")
    assert user.get(set_url(run, uploaded.id)).status_code == 401


def test_a_set_a_run_under_way_carries_is_not_deleted(alice):
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="big", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    evaluation = {"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    experiment = make_experiment(alice.org, evaluation=evaluation)
    run = run_start(actor=SYSTEM, experiment=experiment, reason="quality")
    # The experiment no longer names it; the run started with it still fetches it.
    experiment.evaluation = {}
    experiment.save(update_fields=["evaluation"])
    with pytest.raises(Conflict, match="run under way"):
        evaluation_set_delete(evaluation_set=uploaded, actor=SYSTEM)
    assert EvaluationSet.objects.filter(id=uploaded.id).exists()
    Run.objects.filter(id=run.id).update(state=RunState.SUCCEEDED)
    evaluation_set_delete(evaluation_set=uploaded, actor=SYSTEM)
    assert not EvaluationSet.objects.filter(id=uploaded.id).exists()


def test_the_judges_key_reaches_the_pod_only_in_its_environment(alice, settings, monkeypatch):
    settings.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1"]
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    uploaded = evaluation_set_upload(org=alice.org, actor=SYSTEM, name="judged", raw=JUDGED)
    judge = judge_endpoint(alice.org)
    experiment = make_experiment(
        alice.org, evaluation={"set_id": str(uploaded.id), "judge_endpoint_id": str(judge.id)}
    )
    run = run_start(actor=SYSTEM, experiment=experiment, reason="quality")
    # Changed under the run: its job still names the digest of what it was started with, so
    # its agent refuses the changed file (tests/agents/test_runner_evaluation.py).
    uploaded.file.save(f"{alice.org.id}/edited.jsonl", ContentFile(b"{}"), save=True)
    recorder = RecordingProvider()
    monkeypatch.setattr(provisioning, "provider_for", lambda *, org, name: recorder)
    outcome = provisioning.run_provision(run_id=run.id, owner="w")
    run.refresh_from_db()
    assert outcome == "created", run.failure_reason
    (spec,) = recorder.specs
    assert spec.env[protocol.JUDGE_API_KEY_ENV] == KEY
    # Where the judge's requests may go: the addresses its host resolved to, checked now.
    assert spec.env[protocol.JUDGE_ADDRESSES_ENV] == "127.0.0.1"
    job_text = base64.b64decode(spec.env["BENCHSITE_JOB"]).decode()
    assert KEY not in job_text
    in_pod = protocol.JobSpec.model_validate_json(job_text)
    assert in_pod.evaluation.set_sha256 == hashlib.sha256(JUDGED).hexdigest()


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
