"""The engine that serves one trial of a job: real vLLM, the simulator, or an existing
endpoint (only checked, never started; its key from ``BENCHSITE_ENDPOINT_API_KEY``, the addresses
the site checked for its host from ``BENCHSITE_ENDPOINT_ADDRESSES``).

Guarantees: the serve configuration goes through ``agents.protocol.serve_args`` (an argv, never
a shell string); a configuration the schema refuses raises ``ServeGridError`` before anything
starts; the simulator gets the job's model architecture and GPU type, so its figures are those
of the rented hardware (labelled simulated everywhere).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.engines.endpoint import EndpointEngine
from agents.engines.process import ProcessEngine
from agents.engines.sim.engine import sim_engine
from agents.engines.sim.noise import derived_seed
from agents.engines.vllm import vllm_engine
from agents.protocol import (
    DISK_RESERVE_ENV,
    ENDPOINT_ADDRESSES_ENV,
    ENDPOINT_API_KEY_ENV,
    ENGINE_RESTARTS_ENV,
    HANG_SECONDS_ENV,
    HF_TOKEN_ENV,
    HUB_ENDPOINT_ENV,
    HUB_OFFLINE_ENV,
    JUDGE_ADDRESSES_ENV,
    JUDGE_API_KEY_ENV,
    SIM_OVER_HTTP_ENV,
    VLLM_COMMAND_ENV,
    VLLM_CPU_ENV,
    VLLM_ENV_ENV,
    WEIGHTS_DIR_ENV,
    JobSpec,
    ModelSource,
    lora_serve_flags,
)
from agents.runner.offline_sim import OfflineSimEngine
from agents.weights import DEFAULT_DISK_RESERVE_BYTES

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
    # Where the model's weights are cached on this machine (the pod's network volume when it
    # has one); None: under the run's work folder.
    weights_dir: Path | None = None
    hf_token: str | None = field(default=None, repr=False)  # a secret: never shown
    hub_offline: bool = False  # the weights are cached already; the hub is never asked
    hub_endpoint: str | None = None  # HF_ENDPOINT: another hub (a mirror, a test's fake)
    disk_reserve_bytes: int = DEFAULT_DISK_RESERVE_BYTES
    # Self-heal: how often a trial's engine that dies or hangs mid-measuring is started again,
    # and how long it may send nothing while requests wait before it counts as hung.
    engine_restarts: int = 1
    hang_seconds: float = 300.0
    # An existing endpoint's API key (a secret: never shown, cut out of every log tail).
    endpoint_api_key: str | None = field(default=None, repr=False)
    # The addresses the site resolved the endpoint's host to and checked: connect to these
    # only, never to what the name answers later (empty: look the name up).
    endpoint_addresses: tuple[str, ...] = ()
    # The judge's API key, for an evaluation scored by a judge (a secret: never shown).
    judge_api_key: str | None = field(default=None, repr=False)
    # The addresses the site checked for the judge's host (empty: look the name up).
    judge_addresses: tuple[str, ...] = ()
    # The simulator as a server measured over HTTP in wall time at the job's ``sim_speed``,
    # instead of in its own time: for testing the agent's process and network paths on a
    # stand-in for vLLM (its figures then move with the host's load).
    sim_over_http: bool = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> EngineOptions:
        """``BENCHSITE_VLLM_COMMAND`` (e.g. ``/opt/vllm/bin/vllm serve``),
        ``BENCHSITE_VLLM_CPU=1`` (vLLM's CPU backend) and ``BENCHSITE_VLLM_ENV``: ``KEY=VALUE``
        words (shell quoting) added to vLLM's otherwise built environment;
        ``BENCHSITE_WEIGHTS_DIR`` (the weights cache), ``BENCHSITE_DISK_RESERVE_GB`` (kept free
        beside the weights, default 2), ``BENCHSITE_ENGINE_RESTARTS`` (default 1) and
        ``BENCHSITE_HANG_SECONDS`` (default 300), and the hub's own ``HF_TOKEN``,
        ``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` (weights this machine has cached already), and
        ``BENCHSITE_ENDPOINT_API_KEY``, an existing endpoint's API key,
        ``BENCHSITE_ENDPOINT_ADDRESSES``, the IP addresses (comma-separated) the site checked
        for the endpoint's host, ``BENCHSITE_JUDGE_API_KEY``, an evaluation judge's key,
        ``BENCHSITE_JUDGE_ADDRESSES``, those the site checked for the judge's host, and
        ``BENCHSITE_SIM_OVER_HTTP=1`` (the simulator as a server, measured over HTTP).
        Raises ``ValueError`` naming the variable for a value it cannot use."""
        environ = os.environ if environ is None else environ
        command = tuple(shlex.split(environ.get(VLLM_COMMAND_ENV, ""))) or cls.vllm_command
        cpu = _true(environ.get(VLLM_CPU_ENV, ""))
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
        weights_dir = environ.get(WEIGHTS_DIR_ENV, "").strip()
        reserve = environ.get(DISK_RESERVE_ENV, "").strip()
        try:
            reserve_bytes = int(float(reserve) * 1024**3) if reserve else DEFAULT_DISK_RESERVE_BYTES
        except (ValueError, OverflowError):  # not a number, or inf/nan
            raise ValueError(
                f"{DISK_RESERVE_ENV}: expected a number of GiB, got {reserve!r}"
            ) from None
        if reserve_bytes < 0:
            raise ValueError(f"{DISK_RESERVE_ENV}: must not be negative")
        restarts = _number(environ, ENGINE_RESTARTS_ENV, int, default=1, low=0, high=10)
        hang = _number(environ, HANG_SECONDS_ENV, float, default=300.0, low=5.0, high=86_400.0)
        return cls(
            vllm_command=command,
            cpu=cpu,
            vllm_env=extra,
            weights_dir=Path(weights_dir).expanduser() if weights_dir else None,
            hf_token=environ.get(HF_TOKEN_ENV) or None,
            hub_offline=_true(environ.get(HUB_OFFLINE_ENV, "")),
            hub_endpoint=environ.get(HUB_ENDPOINT_ENV) or None,
            disk_reserve_bytes=reserve_bytes,
            engine_restarts=restarts,
            hang_seconds=hang,
            endpoint_api_key=environ.get(ENDPOINT_API_KEY_ENV) or None,
            endpoint_addresses=_addresses(environ, ENDPOINT_ADDRESSES_ENV),
            judge_api_key=environ.get(JUDGE_API_KEY_ENV) or None,
            judge_addresses=_addresses(environ, JUDGE_ADDRESSES_ENV),
            sim_over_http=_true(environ.get(SIM_OVER_HTTP_ENV, "")),
        )


def _number(environ: Mapping[str, str], name: str, kind: type, *, default, low, high):
    """``environ[name]`` as an int or float within [low, high]; ``default`` when unset.
    Raises ``ValueError`` naming the variable."""
    text = environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{name}: expected a number, got {text!r}") from None
    if not low <= value <= high:  # also refuses nan
        raise ValueError(f"{name}: must be from {low:g} to {high:g}, got {text!r}")
    return value


def _addresses(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """``environ[name]``'s comma-separated IP addresses; raises ``ValueError`` naming it."""
    words = [word.strip() for word in environ.get(name, "").split(",") if word.strip()]
    try:
        return tuple(str(ipaddress.ip_address(word)) for word in words)
    except ValueError:
        raise ValueError(f"{name}: expected IP addresses separated by commas") from None


def _true(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def sim_model_file(model: ModelSource, workdir: Path) -> Path:
    """Writes the job's model architecture where the simulator reads it: the facts
    ``agents.hardware`` derives from it (its columns and, where the job states them, the
    facts beyond: experts, MLA, sliding windows), as the site does from the registered
    model (``ModelSource.facts``)."""
    path = Path(workdir) / "model_spec.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    facts = model.facts()
    path.write_text(json.dumps(facts.to_mapping(), indent=1), encoding="utf-8")
    return path


def trial_engine(
    job: JobSpec,
    serve_config: Mapping[str, object],
    *,
    workdir: Path,
    options: EngineOptions,
    weights_dir: Path | None = None,
    startup_timeout: float | None = None,
    lora_dir: Path | None = None,
) -> ProcessEngine | EndpointEngine | OfflineSimEngine:
    """A fresh (not yet started) engine for one trial; ``startup_timeout`` caps start-up.
    An existing endpoint is one that is only checked (``agents.engines.endpoint``).

    Real vLLM serves the job's ``local_path`` when it has one, else the repository at its
    revision from the weights cache ``weights_dir`` with the hub offline (the runner has
    fetched the snapshot there before the first trial): the command a deployment runs. Its
    LoRA adapters are served from ``lora_dir/<name>`` (the runner links each to its snapshot),
    or by repo id without one."""
    timeout = min(startup_timeout or options.startup_timeout, options.startup_timeout)
    timeout = max(timeout, 1.0)
    if job.engine.kind == "endpoint":
        return EndpointEngine(
            base_url=job.engine.base_url or "",
            model=job.model.served_model_name,
            api_key=options.endpoint_api_key,
            route=job.workload.endpoint,
            addresses=options.endpoint_addresses,
        )
    if job.engine.kind == "sim":
        noise_seed = job.engine.noise_seed
        server = sim_engine(
            model_spec=str(sim_model_file(job.model, workdir)),
            gpu=job.engine.gpu_type,
            config=serve_config,
            workdir=workdir,
            served_model_name=job.model.served_model_name,
            speed=job.engine.sim_speed,
            startup_speed=options.sim_startup_speed,
            vllm_version=job.engine.vllm_version,
            startup_timeout=timeout,
            # Each configuration draws its own noise, the same in every run of this seed.
            noise_seed=None if noise_seed is None else derived_seed(noise_seed, serve_config),
        )
        if options.sim_over_http:
            return server
        return OfflineSimEngine(argv=server.argv, workdir=Path(workdir))
    local = job.model.local_path
    return vllm_engine(
        model=local or job.model.hf_repo,
        revision=None if local else job.model.revision,
        config=serve_config,
        workdir=workdir,
        command=options.vllm_command,
        served_model_name=job.model.served_model_name,
        vllm_version=job.engine.vllm_version,
        trust_remote_code=job.model.trust_remote_code,
        extra_args=lora_serve_flags(
            job.model.lora_adapters,
            {
                a.name: str(lora_dir / a.name) if lora_dir else a.hf_repo
                for a in job.model.lora_adapters
            },
            serve_config,
        ),
        cpu=options.cpu,
        hf_home=weights_dir,
        hf_token=options.hf_token,
        hub_offline=weights_dir is not None,
        env=dict(options.vllm_env) or None,
        startup_timeout=timeout,
    )
