"""What a waiting ``runs start`` shows: the run's state, trials done and spend.

On a terminal a rich live line redraws in place; anywhere else (a CI log) one plain line is
printed per change, never a redraw, so the log reads top to bottom.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, TextIO


def _trials_done(run: dict[str, Any]) -> int:
    return sum(1 for trial in run.get("trials") or [] if trial.get("finished_at"))


def _status(run: dict[str, Any], total_trials: Any, started: float) -> str:
    total = total_trials if total_trials not in (None, "") else "?"
    measured = sum(len(trial.get("measurements") or []) for trial in run.get("trials") or [])
    line = (
        f"{run['state']} · trials {_trials_done(run)}/{total} · levels measured {measured} · "
        f"spend ${run.get('cost_usd') or '0'}"
    )
    if run.get("cancel_requested_at") and run["state"] not in ("cancelled",):
        line += " · cancel requested"
    return f"{line} · {time.monotonic() - started:.0f}s"


class PlainProgress:
    """One line per change of state, trials done, levels measured or spend."""

    def __init__(self, stream: TextIO, run_id: str, total_trials: Any):
        self._stream, self._run_id, self._total = stream, run_id, total_trials
        self._last: str | None = None
        self._started = time.monotonic()

    def update(self, run: dict[str, Any]) -> None:
        line = _status(run, self._total, self._started)
        key = line.rsplit(" · ", 1)[0]  # the elapsed time alone is no change
        if key != self._last:
            self._last = key
            self._stream.write(f"run {self._run_id[:8]}: {line}\n")
            self._stream.flush()


class RichProgress:
    """A spinner line that redraws in place on a terminal."""

    def __init__(self, stream: TextIO, run_id: str, total_trials: Any):
        from rich.console import Console

        self._console = Console(file=stream)
        self._run_id, self._total = run_id, total_trials
        self._started = time.monotonic()
        self._status = self._console.status(f"run {run_id[:8]}: starting")

    def __enter__(self):
        self._status.__enter__()
        return self

    def __exit__(self, *exc):
        self._status.__exit__(*exc)

    def update(self, run: dict[str, Any]) -> None:
        self._status.update(f"run {self._run_id[:8]}: {_status(run, self._total, self._started)}")


@contextlib.contextmanager
def progress_for(stream: TextIO, *, run_id: str, total_trials: Any) -> Iterator[Any]:
    if stream.isatty():
        with RichProgress(stream, run_id, total_trials) as progress:
            yield progress
    else:
        yield PlainProgress(stream, run_id, total_trials)
