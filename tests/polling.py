"""Waiting in tests for what another process or thread does, where there is no event to wait on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    condition: Callable[[], T], timeout: float = 10.0, what: str = "the condition", every=0.05
) -> T:
    """Calls ``condition`` every ``every`` seconds until it returns something truthy, and
    returns that; raises AssertionError naming ``what`` once ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
