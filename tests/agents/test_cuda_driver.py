"""The image's CUDA against the pod's driver (issue 34): NVIDIA's minimum Linux driver per
CUDA release, the ``cuda_driver_too_old`` failure class with both versions, from a fake
driver (NVML's answers replaced) through the runner's messages."""

from __future__ import annotations

import dataclasses

from agents import protocol
from agents.protocol import cuda_driver_problem, minimum_driver
from agents.runner import hostfacts
from agents.runner import runner as runner_module

from .test_runner import FAST_STARTUP, make_job, run


def test_it_knows_nvidias_minimum_driver_per_cuda_release():
    assert minimum_driver("12.9") == "575.51.03"
    assert minimum_driver("12.8.1") == "570.26"  # an update needs its GA's driver at least
    assert minimum_driver("13.0") == "580.65.06"
    assert minimum_driver("12.7") is None and minimum_driver("cpu") is None


def test_a_cuda_12_9_image_on_a_550_driver_is_named_with_both_versions():
    problem = cuda_driver_problem(image_cuda="12.9", driver="550.54.15")
    assert problem is not None
    assert "CUDA 12.9" in problem and "575.51.03 or newer" in problem
    assert "driver is 550.54.15" in problem


def test_a_new_enough_or_unknown_driver_is_no_problem():
    assert cuda_driver_problem(image_cuda="12.8", driver="570.86.10") is None
    assert cuda_driver_problem(image_cuda="12.9", driver="575.51.03") is None
    # Versions compare as numbers, not text: 1000 > 999.
    assert cuda_driver_problem(image_cuda="12.9", driver="1000.1") is None
    for image, driver in [(None, "550.54.15"), ("12.9", None), ("12.7", "450.1"), ("12.9", "?")]:
        assert cuda_driver_problem(image_cuda=image, driver=driver) is None


def test_the_image_cuda_comes_from_the_images_environment(monkeypatch):
    monkeypatch.setenv("CUDA_VERSION", "12.9.1")
    assert hostfacts.image_cuda_version() == "12.9.1"


def fake_host(**facts):
    def host_facts(*, vllm_version=None):
        return protocol.HostFacts(hostname="pod", vllm_version=vllm_version, **facts)

    return host_facts


def vllm_job(tmp_path):
    job = make_job([{"max_num_seqs": 4}, {"max_num_seqs": 8}], concurrency=(1,), requests=2)
    weights = tmp_path / "weights"
    weights.mkdir()
    return job.model_copy(
        update={
            "engine": protocol.EngineSpec(kind="vllm", gpu_type="H100", gpu_count=1),
            "model": job.model.model_copy(update={"local_path": str(weights)}),
        }
    )


def test_a_vllm_trial_on_a_too_old_driver_fails_with_its_class(tmp_path, monkeypatch):
    # The fake driver: NVML would say 550.54.15; the image says CUDA 12.9.
    monkeypatch.setattr(
        runner_module,
        "host_facts",
        fake_host(driver_version="550.54.15", cuda_version="12.4", image_cuda_version="12.9"),
    )
    # A vllm command that must never run: the check comes before the engine starts.
    options = dataclasses.replace(FAST_STARTUP, vllm_command=("/bin/false",))
    summary, recorder, _ = run(vllm_job(tmp_path), tmp_path, engine_options=options)
    hello = recorder.of("hello")[0]["host"]
    assert (hello["driver_version"], hello["image_cuda_version"]) == ("550.54.15", "12.9")
    finished = recorder.of("trial_finished")
    assert [(m["outcome"], m["failure_class"]) for m in finished] == [
        ("failed", "cuda_driver_too_old"),
        ("failed", "cuda_driver_too_old"),
    ]
    assert "CUDA 12.9" in finished[0]["log_tail"] and "550.54.15" in finished[0]["log_tail"]
    assert summary.trials_failed == 2
