"""What a waiting ``runs start`` shows: the run's state, trials done and spend.

On a terminal a rich live line redraws in place; anywhere else (a CI log) one plain line is
printed per change, never a redraw and never an escape code, so the log reads top to bottom.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, TextIO

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner

from benchsite_cli.output import dollars


def _trials_done(run: dict[str, Any]) -> int:
    return sum(1 for trial in run.get("trials") or [] if trial.get("finished_at"))


def _status(run: dict[str, Any], total_trials: Any) -> str:
    """The run's progress without the clock: equal strings mean nothing changed."""
    total = total_trials if total_trials not in (None, "") else "?"
    measured = sum(len(trial.get("measurements") or []) for trial in run.get("trials") or [])
    line = (
        f"{run['state']} · trials {_trials_done(run)}/{total} · levels measured {measured} · "
        f"spend {dollars(run.get('cost_usd'))}"
    )
    if run.get("cancel_requested_at") and run["state"] != "cancelled":
        line += " · cancel requested"
    return line


class PlainProgress:
    """One line per change of state, trials done, levels measured or spend."""

    def __init__(self, stream: TextIO, run_id: str, total_trials: Any):
        self._stream, self._run_id, self._total = stream, run_id, total_trials
        self._last: str | None = None
        self._started = time.monotonic()

    def update(self, run: dict[str, Any]) -> None:
        status = _status(run, self._total)
        if status == self._last:  # the elapsed time alone is no change
            return
        self._last = status
        elapsed = time.monotonic() - self._started
        self._stream.write(f"run {self._run_id[:8]}: {status} · {elapsed:.0f}s\n")
        self._stream.flush()


class RichProgress:
    """A spinner line that redraws in place on a terminal and stays once the run ends."""

    def __init__(self, console: Console, run_id: str, total_trials: Any):
        self._run_id, self._total = run_id, total_trials
        self._started = time.monotonic()
        self._spinner = Spinner("dots", text=f"run {run_id[:8]}: starting")
        self._live = Live(self._spinner, console=console, refresh_per_second=8)

    def __enter__(self):
        self._live.__enter__()
        return self

    def __exit__(self, *exc):
        self._live.__exit__(*exc)

    def update(self, run: dict[str, Any]) -> None:
        elapsed = time.monotonic() - self._started
        status = _status(run, self._total)
        self._spinner.update(text=f"run {self._run_id[:8]}: {status} · {elapsed:.0f}s")
        # Drawn now rather than at the next tick, so every poll's answer is shown.
        self._live.refresh()


@contextlib.contextmanager
def progress_for(
    stream: TextIO, *, run_id: str, total_trials: Any, console: Console | None = None
) -> Iterator[PlainProgress | RichProgress]:
    """Rich on a terminal (or on ``console`` when given), plain lines on ``stream`` otherwise.

    The choice follows ``stream.isatty()`` alone, not rich's own detection: ``FORCE_COLOR``,
    which some CI systems set, must not turn a log into carriage-return redraws.
    """
    if console is None and stream.isatty():
        console = Console(file=stream)
    if console is None:
        yield PlainProgress(stream, run_id, total_trials)
        return
    with RichProgress(console, run_id, total_trials) as progress:
        yield progress
