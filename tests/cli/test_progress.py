"""The display of a waiting ``runs start``: plain lines in a CI log (one per change, no escape
codes, no redraws) and a rich live line on a terminal, both naming state, trials and spend."""

from __future__ import annotations

import io
import re

from rich.console import Console

from benchsite_cli.progress import progress_for

RUN_ID = "0f4c2a9e-5b7d-4d0e-9a51-3f2b8c6d1e70"
ANSI = re.compile(r"\x1b\[")


def detail(state: str, *, done: int = 0, levels: int = 0, spend: str = "0.00") -> dict:
    """A run detail as the API returns it, reduced to what the display reads."""
    trials = [
        {"finished_at": "2026-01-01T00:00:00Z" if i < done else None, "measurements": []}
        for i in range(2)
    ]
    for i in range(levels):
        trials[i % 2]["measurements"].append({"concurrency": 1})
    return {"id": RUN_ID, "state": state, "cost_usd": spend, "trials": trials}


POLLS = [
    detail("queued"),
    detail("queued"),  # nothing changed: no line
    detail("provisioning"),
    detail("benchmarking", levels=1, spend="0.12"),
    detail("benchmarking", levels=1, spend="0.12"),  # nothing changed: no line
    detail("benchmarking", done=1, levels=2, spend="0.25"),
    detail("succeeded", done=2, levels=4, spend="0.51"),
]


class NotATerminal(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_it_prints_one_plain_line_per_change_in_a_ci_log():
    log = NotATerminal()
    with progress_for(log, run_id=RUN_ID, total_trials=2) as progress:
        for poll in POLLS:
            progress.update(poll)
    text = log.getvalue()
    assert not ANSI.search(text) and "\r" not in text
    lines = text.splitlines()
    # The clock alone is no change: strip it to compare what each line says.
    assert [line.rsplit(" · ", 1)[0] for line in lines] == [
        "run 0f4c2a9e: queued · trials 0/2 · levels measured 0 · spend $0.00",
        "run 0f4c2a9e: provisioning · trials 0/2 · levels measured 0 · spend $0.00",
        "run 0f4c2a9e: benchmarking · trials 0/2 · levels measured 1 · spend $0.12",
        "run 0f4c2a9e: benchmarking · trials 1/2 · levels measured 2 · spend $0.25",
        "run 0f4c2a9e: succeeded · trials 2/2 · levels measured 4 · spend $0.51",
    ]
    assert all(re.fullmatch(r".* · \d+s", line) for line in lines)


def test_it_says_a_cancel_was_requested_until_the_run_stops():
    log = NotATerminal()
    with progress_for(log, run_id=RUN_ID, total_trials=None) as progress:
        progress.update(detail("benchmarking") | {"cancel_requested_at": "2026-01-01T00:00Z"})
        progress.update(detail("cancelled") | {"cancel_requested_at": "2026-01-01T00:00Z"})
    first, last = log.getvalue().splitlines()
    assert "trials 0/?" in first and "cancel requested" in first
    assert "cancel requested" not in last


def test_it_draws_a_live_line_on_a_terminal():
    screen = io.StringIO()
    console = Console(force_terminal=True, file=screen, width=160, color_system="standard")
    with progress_for(NotATerminal(), run_id=RUN_ID, total_trials=2, console=console) as progress:
        progress.update(detail("benchmarking", done=1, levels=2, spend="0.25"))
        drawn = screen.getvalue()
        progress.update(detail("succeeded", done=2, levels=4, spend="0.51"))
    text = screen.getvalue()
    # A live display: cursor control codes redraw the line in place.
    assert ANSI.search(text) and "\r" in text
    assert "run 0f4c2a9e: benchmarking · trials 1/2 · levels measured 2 · spend $0.25" in drawn
    # The last state stays on the screen once the wait is over.
    final = ANSI.sub("", text).rsplit("\r", 1)[-1]
    assert "succeeded · trials 2/2 · levels measured 4 · spend $0.51" in final


def test_it_chooses_the_live_line_only_on_a_terminal(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    with progress_for(tty, run_id=RUN_ID, total_trials=2) as progress:
        progress.update(detail("queued"))
    assert "queued · trials 0/2" in tty.getvalue()
    # FORCE_COLOR (set by some CI systems) does not make a log a terminal.
    monkeypatch.setenv("FORCE_COLOR", "1")
    log = NotATerminal()
    with progress_for(log, run_id=RUN_ID, total_trials=2) as progress:
        progress.update(detail("queued"))
    assert not ANSI.search(log.getvalue())


def test_a_run_of_unknown_cost_says_so_not_zero():
    log = NotATerminal()
    with progress_for(log, run_id=RUN_ID, total_trials=2) as progress:
        progress.update(detail("benchmarking") | {"cost_usd": None})
    assert "spend unknown" in log.getvalue() and "$" not in log.getvalue()
