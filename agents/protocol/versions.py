"""vLLM version strings as comparable keys, without ``packaging``."""

from __future__ import annotations

import math
import re

# A PEP 440-like subset: release numbers, then optional aN/bN/rcN, .postN, .devN and +local.
# Enough for vLLM's own versions ("0.6.4.post2.dev157+g2f0a0a17") without `packaging`.
_VERSION = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc)(?P<pre_n>\d*))?"
    r"(?:[-_.]?post(?P<post_n>\d*))?"
    r"(?:[-_.]?dev(?P<dev_n>\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}

VersionKey = tuple[tuple[int, ...], tuple[int, int], int, float]


def parse_vllm_version(version: str) -> VersionKey:
    """Turns a vLLM version string into a key that compares the way PEP 440 orders versions.

    ``"0.9"`` equals ``"0.9.0"``; ``"0.9.0rc1"`` and ``"0.9.0.dev3"`` sort before ``"0.9.0"``;
    ``"0.9.0.post1"`` and local tags such as ``"+cpu"`` do not change the release. Raises
    ``ValueError`` for anything else (``"latest"``, ``"nightly"``): map those to ``None``.
    """
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise ValueError(f"not a vLLM version: {version!r} (expected e.g. '0.11.0')")
    release = tuple(int(part) for part in match["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]  # "0.9.0" and "0.9" are the same release
    has_post = match["post_n"] is not None
    has_dev = match["dev_n"] is not None
    if match["pre"]:
        phase = (_PRE_RANK[match["pre"].lower()], int(match["pre_n"] or 0))
    elif has_dev and not has_post:
        phase = (-1, 0)  # X.Y.devN comes before every pre-release of X.Y
    else:
        phase = (3, 0)  # the final release
    post = int(match["post_n"] or 0) if has_post else -1
    dev = float(match["dev_n"] or 0) if has_dev else math.inf
    return (release, phase, post, dev)
