"""``benchsite-agent bench``'s terminal and the simulator's clock (issue 35, point 9): a
progress bar with the time left that never counts past its total, a level's bar printed
finished before what follows it, and against ``serve-sim --speed 4`` figures in the modelled
GPU's time, marked simulated."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from rich.console import Console

from agents.cli import main
from agents.cli.sim_clock import simulator_speed
from agents.loadgen.events import LevelFinished, LevelStarted, RequestDone
from agents.loadgen.report import ProgressView, capacity_line
from agents.protocol import LevelResult
from tests.agents.fake_openai_server import FakeServer
from tests.site.live_server import free_port


def _screen_lines(raw: str) -> list[str]:
    """What a terminal shows of rich's one-line live area and the lines printed above it: a
    line redrawn (carriage return, erase) shows its last drawing; an erased one, nothing."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", raw)
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n") if line.rsplit("\r", 1)[-1]]


def test_the_bar_grows_with_a_level_that_outruns_its_estimate_and_shows_the_time_left():
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120, color_system=None)
    with ProgressView(console) as view:
        view.handle(LevelStarted(0, {"concurrency": 8}, total=192, duration=None))
        for done in range(1, 223):  # a steady level: 222 requests for an estimate of 192
            view.handle(RequestDone(0, done, 0, done * 16, elapsed=done / 10, record=None))
            if done in (100, 192, 193, 222):
                view.progress.refresh()
        result = LevelResult(completed=222, failed=0, duration=22.2)
        view.handle(LevelFinished(0, result, records=[]))
        view.progress.console.print(capacity_line(CAPACITY))
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue())  # every drawing
    counts = [tuple(map(int, pair)) for pair in re.findall(r"\b(\d+)/(\d+)\b", drawn)]
    assert counts and all(done <= total for done, total in counts), counts
    assert (222, 222) in counts
    assert "ETA" in drawn
    # The finished bar is printed once, before the capacity line; nothing is left after it.
    lines = _screen_lines(screen.getvalue())
    assert lines[-1].startswith("capacity at the SLOs: 64 users"), lines
    assert "222/222" in lines[-2] and sum("222/222" in line for line in lines) == 1, lines


CAPACITY = {
    "axis": "concurrency",
    "capacity": 64,
    "bracket_low": 64,
    "bracket_high": 96,
    "probes": 3,
    "stop_reason": "bracketed",
    "output_throughput": 1200.0,
}


def test_a_server_that_is_not_the_simulator_is_measured_as_it_is(tmp_path):
    with FakeServer() as server:
        assert simulator_speed(server.base_url) is None
    assert simulator_speed(f"http://127.0.0.1:{free_port()}") is None  # nobody there


@pytest.fixture(scope="module")
def serve_sim_at_speed_4():
    """``benchsite-agent serve-sim`` at --speed 4, up and healthy."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "agents.cli", "serve-sim", "--model-spec", "llama-3.1-8b",
         "--gpu", "H100", "--speed", "4", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip  # flag, value
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=1):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("serve-sim did not come up") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        server.wait(10)


LOAD = ["--concurrency", "8", "--num-prompts", "48", "--input-len", "256", "--output-len", "64"]


@pytest.mark.slow
def test_against_serve_sim_at_speed_4_it_reports_the_modelled_gpus_figures_marked_simulated(
    serve_sim_at_speed_4, tmp_path, capsys
):
    model = "meta-llama/Llama-3.1-8B-Instruct"
    served = tmp_path / "served.json"
    code = main(["bench", "--base-url", serve_sim_at_speed_4, "--model", model, *LOAD,
                 "--json", str(served)])  # fmt: skip  # flag, value
    shown = capsys.readouterr().out
    assert code == 0
    assert "SIMULATED" in shown and "simulator at speed 4" in shown
    assert "SIMULATED concurrency 8" in shown  # the level's table says so too
    document = json.loads(served.read_text())
    assert document["config"]["simulated"] == {"speed": 4.0}
    [level] = document["levels"]
    assert level["simulated"] == {"speed": 4.0}

    # The same benchmark predicted offline, in the simulator's own time: the figures over
    # HTTP at 4x, read back in modelled time, agree with it (client overhead and scheduling
    # noise aside); read in the client's wall time they would be 4x off.
    predicted = tmp_path / "predicted.json"
    assert main(["predict", "--model-spec", "llama-3.1-8b", "--gpu", "H100", *LOAD,
                 "--json", str(predicted)]) == 0  # fmt: skip  # flag, value
    [model_level] = json.loads(predicted.read_text())["levels"]
    for figure in ("median_tpot_ms", "output_throughput", "median_e2el_ms"):
        ratio = level[figure] / model_level[figure]
        assert 0.7 < ratio < 1.45, (figure, level[figure], model_level[figure])
