"""The demo's terminal at 80 columns (issue 35, point 5): the progress line stays one line,
log records go to the log file the demo names and not into the terminal, and the
recommended ``vllm serve`` command prints whole, on one line, so that it can be copied."""

from __future__ import annotations

import io
import logging
import re

from celery.signals import setup_logging
from django.conf import settings as django_settings
from django.utils.log import configure_logging
from rich.console import Console
from rich.live import Live

from benchsite.celery import app as celery_app
from runs.demo.answer import levels_table, print_capacity_answer
from runs.demo.plans import SIM_DEMO
from runs.demo.running import _keep_logging, log_to_file, progress_line
from runs.selectors.run_answer import Margin
from tests.site.run_answers import config_answer, simulated_answer

# The site's logging settings, as the test process started with them.
ORIGINAL_LOGGING = django_settings.LOGGING


def terminal(width: int = 80) -> tuple[Console, io.StringIO]:
    screen = io.StringIO()
    return Console(file=screen, width=width, force_terminal=True, color_system=None), screen


def live_frames(line, width: int) -> list[str]:
    """What ``rich.live.Live`` draws of ``line`` on a terminal ``width`` columns wide, frame
    by frame (as the demo's progress is drawn), escape codes left out."""
    console, screen = terminal(width)
    with Live(line, console=console, auto_refresh=False) as live:
        live.refresh()
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())
    return [frame for frame in drawn.rstrip("\n").split("\r") if frame]


def test_it_keeps_the_progress_line_on_one_line_of_80_columns():
    # The longest state and the largest counts the demo shows.
    line = progress_line(
        state="provisioning", trials_done=10, trials_total=10, measured=999, levels_total=120
    )
    for frame in live_frames(line, 80):
        assert "\n" not in frame and len(frame) <= 80, frame
        assert frame.startswith("provisioning · trials 10/10 · levels measured 999 (120 fixed")


def test_it_cuts_the_progress_line_rather_than_wrap_it_on_a_narrow_terminal():
    line = progress_line(
        state="benchmarking", trials_done=1, trials_total=4, measured=3, levels_total=12
    )
    for frame in live_frames(line, 40):
        assert len(frame) == 40 and frame.endswith("…"), frame


def test_it_prints_the_serve_command_whole_on_80_columns():
    command = (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --revision main --host 0.0.0.0 --port 8000 "
        "--served-model-name meta-llama/Llama-3.1-8B-Instruct --max-num-batched-tokens 2048"
    )
    answer = simulated_answer(config_answer(0, {"max_num_batched_tokens": 2048}, command=command))
    console, screen = terminal()
    print_capacity_answer(answer, SIM_DEMO, "simulated H100, catalogue price", console)
    assert f"  {command}" in screen.getvalue().splitlines()


def test_it_sends_log_records_to_the_named_file_not_the_terminal(tmp_path, capfd):
    already_setup = celery_app.log.already_setup
    try:
        log_to_file(tmp_path / "demo.log")
        # What the demo's Celery worker does after it: Django set up again (its fixup), and
        # Celery's own logging set-up.
        configure_logging(django_settings.LOGGING_CONFIG, django_settings.LOGGING)
        celery_app.log.already_setup = False
        celery_app.log.setup_logging_subsystem(loglevel="INFO")
        logging.getLogger("runs.services.provisioning").info("pod bench-1 created on local")
        logging.getLogger("django").warning("a request")
        logging.getLogger("celery.beat").info("beat: Shutting down...")
        for handler in logging.getLogger().handlers:
            handler.flush()
    finally:
        setup_logging.disconnect(_keep_logging)
        celery_app.log.already_setup = already_setup
        for handler in logging.getLogger().handlers:
            handler.close()
        django_settings.LOGGING = ORIGINAL_LOGGING
        configure_logging(django_settings.LOGGING_CONFIG, ORIGINAL_LOGGING)
    written = (tmp_path / "demo.log").read_text()
    for line in ("pod bench-1 created on local", "a request", "beat: Shutting down"):
        assert line in written
    terminal_text = capfd.readouterr()
    for line in ("pod bench-1", "a request", "beat: Shutting down"):
        assert line not in terminal_text.err + terminal_text.out


def test_it_names_vllms_defaults_once_when_they_come_second():
    # The demo printed "max_num_batched_tokens=default costs 109 % more" and then
    # "vLLM's defaults cost 109 % more" when the runner-up was the defaults' trial.
    winner = config_answer(0, {"max_num_batched_tokens": 2048})
    defaults = config_answer(3, {}, command="vllm serve m", capacity=16)
    answer = simulated_answer(
        winner,
        defaults,
        margin_pct=109.0,
        margin_ci95_pct=(70.0, 123.0),
        defaults=defaults,
        over_defaults=Margin(109.0, (70.0, 123.0), False),
    )
    console, screen = terminal(width=200)
    print_capacity_answer(answer, SIM_DEMO, "simulated H100, catalogue price", console)
    said = screen.getvalue()
    assert said.count("109 % more") == 1
    assert "vLLM's defaults cost 109 % more (95 % CI 70–123 %) at their capacity 16." in said
    assert "=default" not in said


def test_the_levels_table_fits_80_columns_whole():
    # The demo's widest figures in every column; before, the verdict wrapped onto a second
    # line and p50/p99 pairs were cut ("36.5/38…").
    widest = ("16384", "25*", "36.5/38.4", "10.9/28.1", "11.1/12.2", "1,764", "$8.016")
    rows = [(*widest, verdict) for verdict in ("met", "too close", "missed")]
    console, screen = terminal(80)
    console.print(levels_table("SIMULATED", "batched", rows))
    lines = screen.getvalue().splitlines()
    body = [line for line in lines if "16384" in line]
    assert len(body) == 3, lines  # one line a level: nothing wrapped
    for line, verdict in zip(body, ("met", "too close", "missed"), strict=True):
        assert len(line) <= 80 and "…" not in line, line
        assert all(figure in line for figure in widest) and verdict in line, line
