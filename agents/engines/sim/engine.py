"""The simulator as an engine: the same process lifecycle as real vLLM.

``sim_engine`` starts ``python -m agents.engines.sim`` with the serve configuration rendered by
``agents.protocol.serve_args`` (exactly the flags ``vllm serve`` would get), so phases,
refusals and stopping go through the code that handles real vLLM.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from agents.engines.process import PASSTHROUGH_ENV, ProcessEngine, free_port
from agents.protocol import serve_args


def sim_engine(
    *,
    model_spec: str,
    gpu: str,
    config: Mapping[str, object],
    workdir: Path,
    served_model_name: str | None = None,
    speed: float = 1.0,
    seed: int = 0,
    noise_seed: int | None = None,
    startup_speed: float | None = None,
    vllm_version: str | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    startup_timeout: float = 120.0,
    python: str = sys.executable,
) -> ProcessEngine:
    """A ``ProcessEngine`` running the simulator for one serve configuration, with the
    defaults ``vllm_version`` sets where ``config`` leaves a flag out.

    Raises ``agents.protocol.ServeGridError`` for a configuration the schema refuses.
    """
    flags = serve_args(config)
    port = port or free_port(host)
    name = served_model_name or "model"
    argv = [
        python,
        "-m",
        "agents.engines.sim",
        model_spec,
        "--gpu",
        gpu,
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        name,
        "--speed",
        repr(float(speed)),
        "--seed",
        str(seed),
        *flags,
    ]
    if noise_seed is not None:
        argv += ["--noise-seed", str(noise_seed)]
    if startup_speed is not None:
        argv += ["--startup-speed", repr(float(startup_speed))]
    if vllm_version is not None:
        argv += ["--vllm-version", vllm_version]
    env = {key: os.environ[key] for key in (*PASSTHROUGH_ENV, "PYTHONPATH") if key in os.environ}
    env["PYTHONUNBUFFERED"] = "1"
    # The simulator must import this very package, wherever the agent runs from.
    package_root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = package_root + (":" + env["PYTHONPATH"] if "PYTHONPATH" in env else "")
    return ProcessEngine(
        name="sim",
        argv=argv,
        env=env,
        host=host,
        port=port,
        model=name,
        workdir=Path(workdir),
        startup_timeout=startup_timeout,
        stop_grace=5.0,
        simulated=True,
    )
