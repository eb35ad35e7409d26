"""A load level's name: how a level (a concurrency, or a request rate) is written.

Guarantee: two forms, each written here only.

- ``level_name``: ``c=8``, ``rate=2.5``, ``rate=inf``, the short name the run page, its
  live updates and ``benchsite runs show`` give a level (the page's script builds the same
  name from a live notice).
- ``load_key``: ``concurrency=8``, ``request_rate=2.0``, ``request_rate=inf``, the load as
  its result's key names it: the level a cost per token was found at (``runs.costs``) and
  the level the CLI's gate pairs and reports a row at. It is a key of pipelines' gate files
  (JUnit test names), so its spelling stays as the value came.

A request rate arrives as a number, a decimal string (the API), ``"inf"`` (the agent's
unbounded rate) or None with ``infinite`` (the site's column, which stores no infinity).
"""

from __future__ import annotations

from typing import Any

INFINITE_RATE = "inf"


def level_name(
    *, concurrency: int | None = None, request_rate: Any = None, infinite: bool = False
) -> str:
    """``c=8``, ``rate=2.5`` (a rate in its shortest form) or ``rate=inf``; "" for no
    level."""
    if concurrency is not None:
        return f"c={concurrency}"
    if infinite or request_rate == INFINITE_RATE:
        return f"rate={INFINITE_RATE}"
    if request_rate is None:
        return ""
    return f"rate={float(request_rate):g}"


def load_key(
    *, concurrency: int | None = None, request_rate: Any = None, infinite: bool = False
) -> str:
    """``concurrency=8``, ``request_rate=2.0`` (the rate as given) or ``request_rate=inf``."""
    if infinite or request_rate == INFINITE_RATE:
        return f"request_rate={INFINITE_RATE}"
    if concurrency is not None:
        return f"concurrency={concurrency}"
    return f"request_rate={request_rate}"
