"""vLLM × CUDA × driver on the pages (issue 34): the experiment page lists what each run's pods
ran, a real-vLLM pod's hello records its GPU type's driver in the catalogue, and the builder
warns before a run when that driver is too old for the CUDA an image was seen to run."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from runs.models import GpuType, Run
from runs.selectors.software_stacks import run_stacks
from runs.services.pod_moves import run_leave_pod
from runs.services.run_tokens import run_token_issue

from .conftest import H100, frozen, make_experiment, make_model, signed_in
from .test_agent_ingest import messages
from .test_web_experiments import builder_form
from .test_web_runs import text_of

pytestmark = pytest.mark.django_db

OLD_POD = {
    "vllm_version": "0.12.0",
    "image_cuda_version": "12.8",
    "driver_version": "570.86.15",
    "image_tag": "v0.12.0",
}
HOST = {
    "hostname": "pod",
    "vllm_version": "0.13.0",
    "image_cuda_version": "12.9",
    "driver_version": "575.57.08",
}


def _run(experiment, **fields) -> Run:
    return Run.objects.create(
        organization=experiment.organization, experiment=experiment, **frozen(experiment), **fields
    )


def _hello(run, host: dict) -> None:
    hello = messages(run.id)[0] | {"host": host}
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {run_token_issue(run=run)}")
    response = agent.post(
        f"/api/v1/agent/runs/{run.id}/messages/", {"messages": [hello]}, format="json"
    )
    assert response.status_code == 200 and response.json()["rejected"] == []


def test_the_experiment_page_lists_each_pods_vllm_cuda_and_driver(alice):
    experiment = make_experiment(alice.org)
    run = _run(experiment, pod_history=[OLD_POD])
    _hello(run, HOST)
    _run(experiment)  # no pod yet: nothing to show
    page = text_of(signed_in(alice).get(f"/o/acme/experiments/{experiment.id}/").content.decode())
    assert "vLLM 0.12.0 · CUDA 12.8 · driver 570.86.15" in page
    assert "vLLM 0.13.0 · CUDA 12.9 · driver 575.57.08" in page


def test_a_real_pods_hello_records_its_gpu_types_driver_and_a_simulated_one_does_not(alice):
    experiment = make_experiment(alice.org)
    _hello(_run(experiment), HOST)
    gpu = GpuType.objects.get(id=H100)
    assert gpu.driver_version == "575.57.08" and gpu.driver_seen_at is not None
    simulated = make_experiment(
        alice.org, experiment.model, name=f"s-{uuid.uuid4()}", engine="sim", engine_image_tag=""
    )
    _hello(_run(simulated), HOST | {"driver_version": "999.1"})
    assert GpuType.objects.get(id=H100).driver_version == "575.57.08"


def test_the_builder_warns_when_the_catalogues_driver_is_too_old_for_the_images_cuda(alice):
    model = make_model(alice.org)
    client = signed_in(alice)
    form = builder_form(model, engine_image_tag="v0.13.0")

    def warnings() -> list[str]:
        checked = client.post("/o/acme/experiments/check/", form).json()
        return [w for w in checked["estimate"]["warnings"] if "cuda_driver_too_old" in w]

    GpuType.objects.filter(id=H100).update(driver_version="550.54.15")
    assert warnings() == []  # no run has said which CUDA v0.13.0 runs
    earlier = make_experiment(alice.org, model=model, engine_image_tag="v0.13.0")
    _hello(_run(earlier), HOST)  # CUDA 12.9 on this pod's driver 575.57.08
    assert warnings() == []  # the catalogue now knows that newer driver
    GpuType.objects.filter(id=H100).update(driver_version="550.54.15")
    (warning,) = warnings()
    assert "Image v0.13.0 runs CUDA 12.9" in warning
    assert "needs NVIDIA driver 575.51.03 or newer" in warning
    assert "reported driver 550.54.15" in warning
    page = client.post("/o/acme/experiments/new/", form | {"action": "check"}).content.decode()
    assert "needs NVIDIA driver 575.51.03 or newer" in page


def test_it_hides_other_tenants_cuda_from_the_builder(alice, charlie):
    earlier = make_experiment(charlie.org, engine_image_tag="v0.13.0")
    _hello(_run(earlier), HOST)
    GpuType.objects.filter(id=H100).update(driver_version="550.54.15")
    form = builder_form(make_model(alice.org), engine_image_tag="v0.13.0")
    checked = signed_in(alice).post("/o/acme/experiments/check/", form).json()
    assert not [w for w in checked["estimate"]["warnings"] if "cuda_driver_too_old" in w]


def test_a_left_pod_keeps_its_cuda_and_driver_in_the_runs_pod_history(alice):
    experiment = make_experiment(alice.org)
    run = _run(experiment)
    _hello(run, HOST)
    run.refresh_from_db()
    run_leave_pod(run, now=timezone.now(), reason="next image", kind="next_image")
    (left,) = run.pod_history
    assert (left["image_cuda_version"], left["driver_version"]) == ("12.9", "575.57.08")
    assert [str(stack) for stack in run_stacks(run)] == [
        "vLLM 0.13.0 · CUDA 12.9 · driver 575.57.08"
    ]
