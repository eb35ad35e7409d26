"""Where a run's pod goes (issue 6): the experiment's GPU type and cloud first, then the
fallbacks it allows on a capacity answer; container disk and network volume from the
experiment; the estimate and budget at the dearest placement — through the real ``runpod``
SDK against the fake Runpod API."""

from __future__ import annotations

import base64
import json
import sys
from decimal import Decimal

import pytest

from runs.actors import Actor
from runs.models import Experiment, GpuType, Run
from runs.placement import Placement, placements
from runs.providers.base import pod_name
from runs.selectors.estimates import experiment_estimate
from runs.services.credentials import provider_key_set
from runs.tasks import MAX_RETRIES
from tests.fakes.runpod_api import FakeRunpodApi

from .conftest import H100, experiment_payload, frozen, make_experiment, make_model
from .db_state import database_state as snapshot

pytestmark = pytest.mark.django_db

KEY = "rpa_acme_placement_0123456789abcdef"
A100 = "NVIDIA A100-SXM4-80GB"
H200 = "NVIDIA H200"
RTX_4090 = "NVIDIA GeForce RTX 4090"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]  # a pod's agent that waits


@pytest.fixture
def retries_run_in_process():
    """A retried task runs its retries at once, in process, instead of raising ``Retry``."""
    from benchsite.celery import app

    app.conf.task_eager_propagates = False
    yield
    app.conf.task_eager_propagates = True


@pytest.fixture
def runpod_account(alice, settings, monkeypatch):
    """Alice's organization on (fake) Runpod, its key stored; pods run an agent that waits."""
    with FakeRunpodApi(api_keys=(KEY,), agent_command=SLEEPER) as fake:
        fake.point_sdk_at_me(monkeypatch)
        settings.BENCHSITE_PROVIDER = "runpod"
        provider_key_set(
            actor=Actor(user=alice.user, via="web"), org=alice.org, provider="runpod", api_key=KEY
        )
        yield fake
        for pod in fake.pods(KEY):
            fake.exit_pod(pod.id)


def start(person, experiment, capture_on_commit):
    """Starts a run over the API; provisioning runs (in-process) once the start commits."""
    with capture_on_commit(execute=True):
        response = person.client().post(
            f"/api/v1/orgs/{person.org.slug}/runs/",
            {"experiment": str(experiment.id)},
            format="json",
        )
    assert response.status_code == 201, response.json()
    return Run.objects.get(id=response.json()["id"])


def creates(fake) -> list[dict]:
    return [r.arguments for r in fake.requests if r.operation == "podFindAndDeployOnDemand"]


# ------------------------------------------------------------------------------------------
# The order of placements
# ------------------------------------------------------------------------------------------


def test_placements_keep_the_gpu_before_the_cloud_and_never_repeat():
    assert placements(
        gpu_type_id=H100,
        cloud_type="secure",
        fallback_gpu_types=[A100, H200],
        allow_other_cloud=True,
    ) == [
        Placement(H100, "secure"),
        Placement(H100, "community"),
        Placement(A100, "secure"),
        Placement(A100, "community"),
        Placement(H200, "secure"),
        Placement(H200, "community"),
    ]
    assert placements(gpu_type_id=H100, cloud_type="community", fallback_gpu_types=[A100]) == [
        Placement(H100, "community"),
        Placement(A100, "community"),
    ]
    assert placements(gpu_type_id=H100, cloud_type="secure") == [Placement(H100, "secure")]


# ------------------------------------------------------------------------------------------
# What the experiment may say, and what it may not
# ------------------------------------------------------------------------------------------


def test_the_api_stores_the_placement_fields(alice):
    model = make_model(alice.org)
    payload = experiment_payload(
        model.id,
        fallback_gpu_types=[A100, H200],
        allow_other_cloud=True,
        container_disk_gb=120,
        network_volume_id="vol4weights",
    )
    url = f"/api/v1/orgs/{alice.org.slug}/experiments/"
    response = alice.client().post(url, payload, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["fallback_gpu_types"], body["allow_other_cloud"]) == ([A100, H200], True)
    assert (body["container_disk_gb"], body["network_volume_id"]) == (120, "vol4weights")
    defaults = alice.client().post(url, experiment_payload(model.id, name="plain"), format="json")
    assert defaults.status_code == 201, defaults.json()
    plain = defaults.json()
    assert (plain["fallback_gpu_types"], plain["allow_other_cloud"]) == ([], False)
    assert (plain["container_disk_gb"], plain["network_volume_id"]) == (80, "")


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"fallback_gpu_types": ["NVIDIA Imaginary 9000"]}, "fallback_gpu_types[0]", "catalogue"),
        ({"fallback_gpu_types": [A100, A100]}, "fallback_gpu_types[1]", "twice"),
        ({"fallback_gpu_types": [H100]}, "fallback_gpu_types[0]", "first"),
        ({"fallback_gpu_types": [A100, H200, RTX_4090, H100, A100]}, "fallback_gpu_types", "4"),
        ({"fallback_gpu_types": "NVIDIA H200"}, "fallback_gpu_types", "list"),
        ({"container_disk_gb": 5}, "container_disk_gb", "10"),
        ({"container_disk_gb": 5000}, "container_disk_gb", "2000"),
        ({"network_volume_id": 'vol"} ) { x'}, "network_volume_id", "letters"),
    ],
)
def test_bad_placement_fields_are_refused_naming_the_field(alice, overrides, field, words):
    model = make_model(alice.org)
    before = snapshot()
    response = alice.client().post(
        f"/api/v1/orgs/{alice.org.slug}/experiments/",
        experiment_payload(model.id, **overrides),
        format="json",
    )
    assert response.status_code == 400, response.json()
    errors = response.json()["error"]["fields"]
    assert field in errors, errors
    assert words in " ".join(errors[field])
    assert snapshot() == before


def test_a_fallback_gpu_that_cannot_hold_the_weights_is_refused(alice):
    model = make_model(alice.org)  # Llama 3.1 8B in bf16: about 15 GiB of weights
    big = make_model(
        alice.org, name="70b", hf_repo="meta-llama/Llama-3.1-70B", parameter_count=70_600_000_000
    )
    ok = alice.client().post(
        f"/api/v1/orgs/{alice.org.slug}/experiments/",
        experiment_payload(model.id, fallback_gpu_types=[RTX_4090]),
        format="json",
    )
    assert ok.status_code == 201, ok.json()
    refused = alice.client().post(
        f"/api/v1/orgs/{alice.org.slug}/experiments/",
        experiment_payload(big.id, name="big", gpu_count=2, fallback_gpu_types=[RTX_4090]),
        format="json",
    )
    assert refused.status_code == 400
    (message,) = refused.json()["error"]["fields"]["fallback_gpu_types[0]"]
    assert "do not fit 2× NVIDIA GeForce RTX 4090" in message


def test_the_estimate_and_the_budget_use_the_dearest_placement(alice):
    model = make_model(alice.org)
    h100_only = make_experiment(alice.org, model, name="h100")
    with_h200 = make_experiment(alice.org, model, name="h200", fallback_gpu_types=[H200])
    plain, dearest = (experiment_estimate(experiment=e) for e in (h100_only, with_h200))
    assert plain.price_usd_per_gpu_hour == Decimal("3.99")  # H100 secure
    assert dearest.price_usd_per_gpu_hour == Decimal("4.59")  # H200 secure
    assert "NVIDIA H200 (secure), the dearest of 2 placements" in dearest.price_source
    assert dearest.total_seconds == plain.total_seconds  # timed on the experiment's own GPU
    assert dearest.cost_usd > plain.cost_usd
    # A cap between the two estimates admits the H100-only run and refuses the other.
    cap = (plain.cost_usd + dearest.cost_usd) / 2
    Experiment.objects.filter(id__in=[h100_only.id, with_h200.id]).update(budget_cap_usd=cap)
    url = f"/api/v1/orgs/{alice.org.slug}/runs/"
    refused = alice.client().post(url, {"experiment": str(with_h200.id)}, format="json")
    assert refused.status_code == 400
    assert "exceeds the experiment's cap" in refused.json()["error"]["fields"]["budget"][0]


def test_an_unpriced_fallback_makes_the_cost_unknown(alice):
    experiment = make_experiment(alice.org, fallback_gpu_types=["NVIDIA A100 80GB PCIe"])
    estimate = experiment_estimate(experiment=experiment)
    assert estimate.cost_usd is None
    assert "NVIDIA A100 80GB PCIe" in " ".join(estimate.warnings)


# ------------------------------------------------------------------------------------------
# Provisioning on Runpod
# ------------------------------------------------------------------------------------------


def test_the_pod_gets_the_experiments_disk_and_network_volume(
    alice, runpod_account, django_capture_on_commit_callbacks
):
    runpod_account.network_volumes[KEY] = [
        {"id": "vol4weights", "name": "hf-cache", "size": 200, "dataCenterId": "EU-RO-1"}
    ]
    experiment = make_experiment(alice.org, container_disk_gb=150, network_volume_id="vol4weights")
    run = start(alice, experiment, django_capture_on_commit_callbacks)
    (pod,) = runpod_account.pods(KEY)
    assert (pod.container_disk_gb, pod.network_volume_id) == (150, "vol4weights")
    (sent,) = creates(runpod_account)
    assert sent["dataCenterId"] == "EU-RO-1"  # the pod goes where its weights cache is
    run.refresh_from_db()
    assert (run.pod_gpu_type, run.pod_cloud_type) == (H100, "secure")


def test_no_capacity_moves_to_the_other_cloud_then_the_next_gpu(
    alice, runpod_account, django_capture_on_commit_callbacks
):
    experiment = make_experiment(
        alice.org, fallback_gpu_types=[A100], allow_other_cloud=True, budget_cap_usd=200
    )
    runpod_account.inject("no_capacity", times=2)  # H100 secure, then H100 community
    run = start(alice, experiment, django_capture_on_commit_callbacks)
    asked = [(c["gpuTypeId"], c["cloudType"]) for c in creates(runpod_account)]
    assert asked == [(H100, "SECURE"), (H100, "COMMUNITY"), (A100, "SECURE")]
    (pod,) = runpod_account.pods(KEY)
    assert (pod.gpu.id, pod.cloud_type) == (A100, "SECURE")
    run.refresh_from_db()
    assert (run.pod_id, run.pod_gpu_type, run.pod_cloud_type) == (pod.id, A100, "secure")
    assert run.price_usd_hr == Decimal("1.79")  # the A100's billed rate, not the H100's
    job = json.loads(base64.b64decode(pod.env["BENCHSITE_JOB"]))
    assert job["engine"]["gpu_type"] == A100  # the agent is told the GPU it really has


def test_a_rate_limit_retries_the_same_placement_instead_of_moving_on(
    alice, runpod_account, django_capture_on_commit_callbacks, retries_run_in_process
):
    experiment = make_experiment(alice.org, fallback_gpu_types=[A100], budget_cap_usd=200)
    runpod_account.inject("rate_limited", times=1)
    run = start(alice, experiment, django_capture_on_commit_callbacks)
    asked = [c["gpuTypeId"] for c in creates(runpod_account)]
    assert asked == [H100]  # the 429 never reached the create; the retry asked for H100 again
    (pod,) = runpod_account.pods(KEY)
    assert pod.gpu.id == H100
    run.refresh_from_db()
    assert run.pod_gpu_type == H100 and run.state == "provisioning"


def test_no_capacity_anywhere_fails_the_run_naming_every_placement(
    alice, runpod_account, django_capture_on_commit_callbacks, retries_run_in_process
):
    experiment = make_experiment(
        alice.org, fallback_gpu_types=[A100], allow_other_cloud=True, budget_cap_usd=200
    )
    runpod_account.inject("no_capacity", times=None)
    run = start(alice, experiment, django_capture_on_commit_callbacks)
    run.refresh_from_db()
    assert run.state == "failed"
    assert f"No pod after {MAX_RETRIES + 1} attempts" in run.failure_reason
    for where in (f"{H100} (secure)", f"{H100} (community)", f"{A100} (community)"):
        assert where in run.failure_reason
    assert len(creates(runpod_account)) == 4 * (MAX_RETRIES + 1)  # every placement, every try
    assert runpod_account.pods(KEY) == []


def test_a_pod_adopted_after_a_crash_keeps_the_placement_it_was_asked_for(
    alice, runpod_account, monkeypatch
):
    """The worker dies after creating the pod on the fallback and before recording it: the
    next attempt adopts the pod and bills it as the A100 it is."""
    from runs.services import provisioning

    experiment = make_experiment(alice.org, fallback_gpu_types=[A100], budget_cap_usd=200)
    runpod_account.inject("no_capacity", times=1)

    class WorkerKilled(Exception):
        pass

    created = []
    real_create = provisioning._create_at_first_free_placement

    def create_then_die(*args, **kwargs):
        created.append(real_create(*args, **kwargs))
        raise WorkerKilled

    run = Run.objects.create(
        organization=alice.org,
        experiment=experiment,
        **frozen(experiment, cloud_type="secure", fallback_gpu_types=[A100]),
    )
    with monkeypatch.context() as patch, pytest.raises(WorkerKilled):
        patch.setattr(provisioning, "_create_at_first_free_placement", create_then_die)
        provisioning.run_provision(run_id=run.id, owner="worker-1")
    assert len(created) == 1  # the A100 pod exists; the run row does not know it
    Run.objects.filter(id=run.id).update(lease_expires_at="2000-01-01T00:00:00Z")
    assert provisioning.run_provision(run_id=run.id, owner="worker-2") == "adopted"
    (pod,) = runpod_account.pods(KEY)
    run.refresh_from_db()
    assert (run.pod_id, pod.name) == (pod.id, pod_name(run.id))
    assert (run.pod_gpu_type, run.price_usd_hr) == (A100, Decimal("1.79"))
    assert GpuType.objects.filter(id=run.pod_gpu_type).exists()
