"""Whether a pod's NVIDIA driver can run an image's CUDA: NVIDIA's published minimum Linux
driver per CUDA release, and the ``cuda_driver_too_old`` verdict with both versions.

Guarantees:

- ``MINIMUM_LINUX_DRIVER`` is the "Toolkit Driver Version" column (Linux x86_64, each
  major.minor's GA release) of Table 3, "CUDA Toolkit and Corresponding Driver Versions", in
  NVIDIA's CUDA Toolkit release notes (read in the CUDA 13.2 notes). A CUDA runtime newer
  than the driver fails to initialise (``cudaErrorInsufficientDriver``); the minor-version
  compatibility that lets some 12.x programs run on an older 12.x driver is not relied on.
- ``cuda_driver_problem`` answers None when it cannot tell (a version missing or unreadable,
  a CUDA release not in the table): a check that cannot read a fact never fails a trial.
"""

from __future__ import annotations

import re

CUDA_DRIVER_TOO_OLD = "cuda_driver_too_old"

# CUDA major.minor → the lowest Linux x86_64 driver its GA toolkit needs.
MINIMUM_LINUX_DRIVER = {
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
    (13, 1): "590.44.01",
    (13, 2): "595.45.04",
}

_NUMBERS = re.compile(r"^\s*(\d+(?:\.\d+)*)")


def _parts(version: str | None) -> tuple[int, ...] | None:
    match = _NUMBERS.match(version or "")
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def minimum_driver(cuda_version: str | None) -> str | None:
    """The lowest Linux driver that runs ``cuda_version`` ("12.9", "12.9.1"), None when the
    table does not know that release."""
    parts = _parts(cuda_version)
    return None if parts is None or len(parts) < 2 else MINIMUM_LINUX_DRIVER.get(parts[:2])


def cuda_driver_problem(*, image_cuda: str | None, driver: str | None) -> str | None:
    """Why the image's CUDA cannot run on the pod's driver, naming both versions and the
    driver it needs; None when it can, or when it cannot be told."""
    needed = minimum_driver(image_cuda)
    have, want = _parts(driver), _parts(needed)
    if have is None or want is None or have >= want:
        return None
    return (
        f"the image's CUDA {image_cuda} needs NVIDIA driver {needed} or newer; this pod's "
        f"driver is {driver} (NVIDIA CUDA Toolkit release notes, minimum Linux driver per "
        "CUDA release): rent another pod or use an image built for an older CUDA"
    )
