"""The engine that serves one trial of a job: real vLLM or the simulator.

Guarantees: the serve configuration goes through ``agents.protocol.serve_args`` (an argv, never
a shell string); a configuration the schema refuses raises ``ServeGridError`` before anything
starts; the simulator gets the job's model architecture and GPU type, so its figures are those
of the rented hardware (labelled simulated everywhere).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.engines.process import ProcessEngine
from agents.engines.sim.engine import sim_engine
from agents.engines.vllm import vllm_engine
from agents.hardware import REGISTERED_FACTS, ModelFacts
from agents.protocol import JobSpec, ModelSource

VLLM_COMMAND_ENV = "BENCHSITE_VLLM_COMMAND"
VLLM_CPU_ENV = "BENCHSITE_VLLM_CPU"
VLLM_ENV_ENV = "BENCHSITE_VLLM_ENV"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EngineOptions:
    """How this machine runs engines (not part of the job: the same job runs on a Runpod pod
    with ``vllm serve`` on its GPUs, or on a developer's box with a vllm-cpu virtualenv)."""

    vllm_command: tuple[str, ...] = ("vllm", "serve")
    cpu: bool = False
    vllm_env: Mapping[str, str] = field(default_factory=dict)
    startup_timeout: float = 900.0
    sim_startup_speed: float | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EngineOptions:
        """``BENCHSITE_VLLM_COMMAND`` (e.g. ``/opt/vllm/bin/vllm serve``),
        ``BENCHSITE_VLLM_CPU=1`` (vLLM's CPU backend) and ``BENCHSITE_VLLM_ENV``: ``KEY=VALUE``
        words (shell quoting) added to vLLM's otherwise built environment, e.g.
        ``HF_HOME=/srv/hf HF_HUB_OFFLINE=1`` for weights this machine has cached already.
        Raises ``ValueError`` naming the variable for a word that is not ``KEY=VALUE``."""
        environ = os.environ if environ is None else environ
        command = tuple(shlex.split(environ.get(VLLM_COMMAND_ENV, ""))) or cls.vllm_command
        cpu = environ.get(VLLM_CPU_ENV, "").lower() in ("1", "true", "yes")
        extra: dict[str, str] = {}
        try:
            words = shlex.split(environ.get(VLLM_ENV_ENV, ""))
        except ValueError as exc:  # an unbalanced quote
            raise ValueError(f"{VLLM_ENV_ENV}: {exc}") from None
        for word in words:
            key, equals, value = word.partition("=")
            if not equals or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"{VLLM_ENV_ENV}: expected KEY=VALUE words, got {word!r}")
            extra[key] = value
        return cls(vllm_command=command, cpu=cpu, vllm_env=extra)


def sim_model_file(model: ModelSource, workdir: Path) -> Path:
    """Writes the job's model architecture where the simulator reads it: the facts
    ``agents.hardware`` derives from it, as the site does from the registered model."""
    path = Path(workdir) / "model_spec.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    facts = ModelFacts.from_registered(**model.model_dump(include=REGISTERED_FACTS))
    path.write_text(json.dumps(facts.to_mapping(), indent=1), encoding="utf-8")
    return path


def trial_engine(
    job: JobSpec,
    serve_config: Mapping[str, object],
    *,
    workdir: Path,
    options: EngineOptions,
    startup_timeout: float | None = None,
) -> ProcessEngine:
    """A fresh (not yet started) engine for one trial; ``startup_timeout`` caps start-up."""
    timeout = min(startup_timeout or options.startup_timeout, options.startup_timeout)
    timeout = max(timeout, 1.0)
    if job.engine.kind == "sim":
        return sim_engine(
            model_spec=str(sim_model_file(job.model, workdir)),
            gpu=job.engine.gpu_type,
            config=serve_config,
            workdir=workdir,
            served_model_name=job.model.served_model_name,
            speed=job.engine.sim_speed,
            startup_speed=options.sim_startup_speed,
            startup_timeout=timeout,
        )
    return vllm_engine(
        model=job.model.local_path or job.model.hf_repo,
        config=serve_config,
        workdir=workdir,
        command=options.vllm_command,
        served_model_name=job.model.served_model_name,
        vllm_version=job.engine.vllm_version,
        cpu=options.cpu,
        env=dict(options.vllm_env) or None,
        startup_timeout=timeout,
    )
