"""Builds an engine from a JSON description (``benchsite-agent engine-up --config``).

```json
{"engine": "vllm", "model": "/models/tiny", "served_model_name": "tiny",
 "serve": {"max_num_seqs": 8, "max_model_len": 512, "enforce_eager": true},
 "vllm_command": ["vllm", "serve"], "vllm_version": "0.32.0", "cpu": true,
 "extra_args": [], "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "port": 8000}
{"engine": "sim", "model_spec": "llama-3.1-8b", "gpu": "H100", "speed": 10,
 "serve": {"max_num_seqs": 64}}
```

Guarantees: unknown keys and wrongly typed values are refused with a message naming the
key (``EngineConfigError``); serve flags go through ``agents.protocol.serve_args``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from agents.engines.process import ProcessEngine
from agents.engines.sim.engine import sim_engine
from agents.engines.vllm import vllm_engine
from agents.protocol import ServeGridError

_COMMON = {
    "engine": str,
    "serve": dict,
    "served_model_name": str,
    "host": str,
    "port": int,
    "startup_timeout": (int, float),
}
_KEYS = {
    "vllm": {
        **_COMMON,
        "model": str,
        "vllm_command": list,
        "vllm_version": str,
        "cpu": bool,
        "extra_args": list,
        "env": dict,
    },
    "sim": {
        **_COMMON,
        "model_spec": str,
        "gpu": str,
        "speed": (int, float),
        "startup_speed": (int, float),
        "seed": int,
    },
}


class EngineConfigError(ValueError):
    """An engine description that cannot be used; the message names the key."""


def engine_from_config(
    data: Mapping[str, object], *, workdir: Path, engine: str | None = None
) -> ProcessEngine:
    kind = engine or data.get("engine")
    if kind not in _KEYS:
        raise EngineConfigError(f"engine: expected 'vllm' or 'sim', got {kind!r}")
    allowed = _KEYS[kind]
    problems = []
    for key, value in data.items():
        if key not in allowed:
            problems.append(f"{key}: unknown key for the {kind} engine")
        elif isinstance(value, bool) and allowed[key] is not bool:
            problems.append(f"{key}: a boolean is not allowed here")
        elif not isinstance(value, allowed[key]):
            problems.append(f"{key}: wrong type {type(value).__name__}")
    required = ("model",) if kind == "vllm" else ("model_spec", "gpu")
    problems += [f"{key}: required" for key in required if key not in data]
    for key in ("vllm_command", "extra_args"):
        if key in data and not all(isinstance(item, str) for item in data[key]):
            problems.append(f"{key}: expected a list of strings")
    if "env" in data and not all(isinstance(v, str) for v in data["env"].values()):
        problems.append("env: values must be strings")
    if problems:
        raise EngineConfigError("; ".join(problems))
    serve = dict(data.get("serve", {}))
    options = {
        key: data[key]
        for key in ("served_model_name", "host", "port", "startup_timeout")
        if key in data
    }
    try:
        if kind == "vllm":
            return vllm_engine(
                model=data["model"],
                config=serve,
                workdir=workdir,
                command=tuple(data.get("vllm_command", ("vllm", "serve"))),
                vllm_version=data.get("vllm_version"),
                cpu=data.get("cpu", False),
                extra_args=tuple(data.get("extra_args", ())),
                env=data.get("env"),
                **options,
            )
        return sim_engine(
            model_spec=data["model_spec"],
            gpu=data["gpu"],
            config=serve,
            workdir=workdir,
            speed=float(data.get("speed", 1.0)),
            startup_speed=data.get("startup_speed"),
            seed=data.get("seed", 0),
            **options,
        )
    except ServeGridError as exc:
        raise EngineConfigError(
            "; ".join(f"serve.{e.field}: {e.message}" for e in exc.errors)
        ) from None
