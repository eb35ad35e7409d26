"""The deployment recipe of a trial: how to serve its configuration in production.

Guarantees:
- The ``vllm serve`` flags come only from ``agents.protocol.serve_args`` (the same typed,
  version-aware schema the agent uses to start the benchmark), so the recipe serves exactly
  the configuration that was measured; a configuration the schema refuses raises
  ``ServeGridError`` rather than giving a command that would differ.
- Everything is read from what the run was started with (``runs.run_as_started``: its model,
  image and GPUs) and where its pod actually landed, never from the experiment or model as
  edited since.
- The words after ``vllm serve`` come from ``agents.protocol.serve_command_args``, the
  function the agent starts the benchmark with: the recipe's command is the benchmarked one,
  the address it listens on aside (the model at its revision, the served name, the flags).
- Commands are built as argv lists and quoted once (``shlex.join``) for display.
"""

from __future__ import annotations

import shlex

from agents.protocol import lora_serve_flags, serve_args, serve_command_args
from runs.experiment_spec import vllm_version_of_tag
from runs.models import Trial
from runs.run_as_started import run_cloud_type, run_engine, run_model, run_pod_storage

VLLM_IMAGE = "vllm/vllm-openai"
SERVE_PORT = 8000


def trial_recipe(*, trial: Trial) -> dict:
    """The ``vllm serve`` command, a ``docker run`` line and the Runpod pod settings for
    ``trial`` (a JSON-safe dict; see the module docstring)."""
    run = trial.run
    engine, model = run_engine(run), run_model(run)
    container_disk_gb, network_volume_id = run_pod_storage(run)
    tag = trial.image_tag or engine.image_tag or "latest"  # its pod's image
    # A deployment listens on every interface of its container (that is its job); text only.
    args = serve_command_args(
        model=model.hf_repo,
        revision=model.revision,
        # The benchmark served the model under this name; clients keep using it.
        served_model_name=model.served_model_name,
        host="0.0.0.0",  # noqa: S104
        port=SERVE_PORT,
        flags=[
            *serve_args(trial.serve_config, vllm_version=vllm_version_of_tag(tag)),
            # A deployment names its adapters by repo id; vLLM fetches each one's main branch.
            *lora_serve_flags(
                model.lora_adapters,
                {a.name: a.hf_repo for a in model.lora_adapters},
                trial.serve_config,
            ),
        ],
        trust_remote_code=model.trust_remote_code,
    )
    serve = ["vllm", "serve", *args]
    image = f"{VLLM_IMAGE}:{tag}"
    # The entrypoint is named explicitly: the image's default differs between vLLM versions.
    docker = [
        "docker", "run", "--gpus", "all", "--ipc=host",
        "-p", f"{SERVE_PORT}:{SERVE_PORT}",
        "-v", "huggingface:/root/.cache/huggingface",
        "-e", "HF_TOKEN",
        "--entrypoint", "vllm",
        image, "serve", *args,
    ]  # fmt: skip  # a table
    pod = {
        "gpu_type_id": run.pod_gpu_type or engine.gpu_type,
        "gpu_count": engine.gpu_count,
        "cloud_type": (run.pod_cloud_type or run_cloud_type(run)).upper(),
        "image_name": image,
        "container_disk_in_gb": container_disk_gb,
        "network_volume_id": network_volume_id,
        "ports": f"{SERVE_PORT}/http",
        "env": {"HF_TOKEN": "<your Hugging Face token>"},
        "docker_args": shlex.join(["serve", *args]),
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
