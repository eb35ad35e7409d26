"""The deployment recipe of a trial: how to serve its configuration in production.

Guarantees:
- The ``vllm serve`` flags come only from ``agents.protocol.serve_args`` (the same typed,
  version-aware schema the agent uses to start the benchmark), so the recipe serves exactly
  the configuration that was measured; a configuration the schema refuses raises
  ``ServeGridError`` rather than giving a command that would differ.
- Everything is read from what the run was started with (``runs.frozen_job``: its model,
  image and GPUs) and where its pod actually landed, never from the experiment or model as
  edited since.
- Commands are built as argv lists and quoted once (``shlex.join``) for display.
"""

from __future__ import annotations

import shlex

from agents.protocol import serve_args
from runs.experiment_spec import vllm_version_of_tag
from runs.frozen_job import run_cloud_type, run_engine, run_model, run_pod_storage
from runs.models import Trial

VLLM_IMAGE = "vllm/vllm-openai"
SERVE_PORT = 8000


def trial_recipe(*, trial: Trial) -> dict:
    """The ``vllm serve`` command, a ``docker run`` line and the Runpod pod settings for
    ``trial`` (a JSON-safe dict; see the module docstring)."""
    run = trial.run
    engine, model = run_engine(run), run_model(run)
    container_disk_gb, network_volume_id = run_pod_storage(run)
    tag = engine.image_tag or "latest"
    flags = serve_args(trial.serve_config, vllm_version=vllm_version_of_tag(tag))
    model_args = [model.hf_repo]
    if model.revision and model.revision != "main":
        model_args += ["--revision", model.revision]
    # The benchmark served the model under its repository name; clients keep using it.
    model_args += ["--served-model-name", model.hf_repo]
    # A deployment listens on every interface of its container (that is its job); text only.
    listen = ["--host", "0.0.0.0", "--port", str(SERVE_PORT)]  # noqa: S104
    serve = ["vllm", "serve", *model_args, *listen, *flags]
    image = f"{VLLM_IMAGE}:{tag}"
    # The entrypoint is named explicitly: the image's default differs between vLLM versions.
    docker = [
        "docker", "run", "--gpus", "all", "--ipc=host",
        "-p", f"{SERVE_PORT}:{SERVE_PORT}",
        "-v", "huggingface:/root/.cache/huggingface",
        "-e", "HF_TOKEN",
        "--entrypoint", "vllm",
        image, "serve", *model_args, *listen, *flags,
    ]  # fmt: skip
    pod = {
        "gpu_type_id": run.pod_gpu_type or engine.gpu_type,
        "gpu_count": engine.gpu_count,
        "cloud_type": (run.pod_cloud_type or run_cloud_type(run)).upper(),
        "image_name": image,
        "container_disk_in_gb": container_disk_gb,
        "network_volume_id": network_volume_id,
        "ports": f"{SERVE_PORT}/http",
        "env": {"HF_TOKEN": "<your Hugging Face token>"},
        "docker_args": shlex.join(["serve", *model_args, *listen, *flags]),
        "docker_entrypoint": "vllm",
    }
    return {
        "serve_config": dict(trial.serve_config),
        "serve_argv": serve,
        "serve_command": shlex.join(serve),
        "docker_command": shlex.join(docker),
        "image": image,
        "runpod_pod": pod,
        "benchmarked_command": shlex.join(trial.command) if trial.command else "",
    }
