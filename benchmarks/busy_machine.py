"""A machine whose every core is busy, for checking that a figure does not depend on it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def every_core_busy() -> Iterator[None]:
    """One busy loop per core for the ``with`` block; all of them killed at its end."""
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 2)
    ]
    try:
        yield
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
