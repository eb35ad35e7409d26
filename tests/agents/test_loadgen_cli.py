"""``benchsite-agent bench``: results files, exit codes and clear errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.cli import main
from tests.agents.fake_openai_server import FakeServer

ROOT = Path(__file__).resolve().parents[2]

ISSUE_KEYS = {
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "request_goodput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "max_concurrent_requests",
    "errors",
    "server",
} | {
    f"{stat}_{metric}_ms"
    for stat in ("mean", "median", "p90", "p95", "p99")
    for metric in ("ttft", "tpot", "itl", "e2el")
}


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def bench(server, *extra: str) -> int:
    return main(
        [
            "bench",
            "--base-url",
            server.base_url,
            "--model",
            "fake?ttft_ms=5&itl_ms=1",
            "--input-len",
            "8",
            "--output-len",
            "4",
            *extra,
        ]
    )


def test_it_writes_the_results_and_one_line_per_request(server, tmp_path, capsys):
    out, lines = tmp_path / "out.json", tmp_path / "requests.jsonl"
    code = bench(
        server,
        "--concurrency", "1,4",
        "--request-rate", "inf",
        "--num-prompts", "5",
        "--slo", "ttft_ms=500,tpot_ms=50",
        "--json", str(out),
        "--per-request", str(lines),
    )  # fmt: skip  # flag, value
    assert code == 0
    document = json.loads(out.read_text())
    assert document["interrupted"] is False
    assert document["config"]["levels"] == [
        {"concurrency": 1},
        {"concurrency": 4},
        {"request_rate": "inf"},
    ]
    levels = document["levels"]
    assert [level.get("concurrency", level.get("request_rate")) for level in levels] == [
        1,
        4,
        "inf",
    ]
    for level in levels:
        assert set(level) >= ISSUE_KEYS
        assert level["completed"] == 5 and level["total_output_tokens"] == 20
        assert level["request_goodput"] > 0
        assert level["server"]["generation_tokens"] == 20  # /metrics found by default
    records = [json.loads(line) for line in lines.read_text().splitlines()]
    assert [record["level"] for record in records] == [0] * 5 + [1] * 5 + [2] * 5
    assert all(record["success"] and len(record["itl_ms"]) == 3 for record in records)
    shown = capsys.readouterr().out
    assert "concurrency 4" in shown and "TTFT" in shown and "TPOT" in shown


def test_an_unreachable_server_is_one_error_line_and_exit_code_2(tmp_path, capsys):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = main(["bench", "--base-url", f"http://127.0.0.1:{port}", "--model", "m",
                 "--concurrency", "1",
                 "--json", str(tmp_path / "out.json")])  # fmt: skip  # flag, value
    assert code == 2
    error = capsys.readouterr().err
    assert "cannot reach" in error and "Connection refused" in error
    assert len(error.strip().splitlines()) == 1
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--concurrency", "1,x"], "--concurrency: 'x' is not a whole number"),
        (["--concurrency", "0"], "--concurrency: 0 is outside"),
        (["--request-rate", "-2"], "--request-rate"),
        ([], "give at least one load level"),
        (["--concurrency", "2,2"], "listed twice"),
        (["--concurrency", "1", "--slo", "ttft_ms=fast"], "--slo: 'ttft_ms=fast': 'fast'"),
        (["--concurrency", "1", "--slo", "ttft:p97<3ms"], "--slo: ttft_percentile"),
        (["--concurrency", "1", "--slo", "ttft>3ms"], "--slo: 'ttft>3ms'"),
        (["--concurrency", "1", "--capacity-search", "concurrency"], "needs --slo"),
        (["--concurrency", "1", "--steady", "-1"], "--steady"),
        (
            ["--capacity-search", "concurrency", "--slo", "ttft<9ms", "--max-probes", "0"],
            "--max-probes",
        ),
        (["--concurrency", "1", "--slo", "latency_ms=5"], "--slo: latency_ms: unknown field"),
        (["--concurrency", "1", "--dataset", "sharegpt"], "--dataset"),
        (["--concurrency", "1", "--dataset", "prefix:many"], "shared length is a number"),
        (["--concurrency", "1", "--api-key-env", "BENCHSITE_TEST_UNSET"], "is not set"),
        (["--concurrency", "1", "--tokenizer", "/nonexistent/tok"], "--tokenizer"),
        (["--concurrency", "1", "--metrics-url", "ftp://x"], "--metrics-url"),
        (["--concurrency", "1", "--json", "/nonexistent/dir/out.json"], "does not exist"),
        (["--concurrency", "1", "--dataset", "sharegpt:/nonexistent.json"], "cannot read"),
        (["--concurrency", "1", "--request-timeout", "0"], "--request-timeout"),
    ],
)
def test_bad_arguments_are_named_and_exit_with_code_2(arguments, message, capsys):
    code = main(["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", *arguments])
    assert code == 2
    assert message in capsys.readouterr().err.replace("\n", " ")


@pytest.mark.slow
def test_ctrl_c_writes_the_levels_finished_so_far(server, tmp_path):
    out = tmp_path / "out.json"
    command = [
        sys.executable, "-m", "agents.cli", "bench", "--base-url", server.base_url,
        "--model", "fake?ttft_ms=5&itl_ms=1", "--output-len", "4",
        "--concurrency", "2", "--request-rate", "0.01", "--num-prompts", "4",
        "--json", str(out),
    ]  # fmt: skip  # flag, value
    # The second level would take about 300 s: it is interrupted once the first is written.
    child = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A shell that starts the test run in the background ignores SIGINT, and the child
        # would inherit that: give it the default, as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 20
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert out.exists(), child.communicate(timeout=5)
    child.send_signal(signal.SIGINT)
    _, error = child.communicate(timeout=20)
    assert child.returncode == 130, error
    document = json.loads(out.read_text())
    assert document["interrupted"] is True
    assert [level.get("concurrency") for level in document["levels"]] == [2]
    assert b"1 level(s) finished" in error


@pytest.mark.skipif(not os.access(ROOT / ".venv/bin/benchsite-agent", os.X_OK), reason="no venv")
@pytest.mark.slow
def test_the_console_script_is_installed():
    result = subprocess.run(
        [str(ROOT / ".venv/bin/benchsite-agent"), "bench", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0 and "--request-rate" in result.stdout


@pytest.mark.slow
def test_a_capacity_search_writes_what_it_found(server, tmp_path, capsys):
    out = tmp_path / "out.json"
    code = bench(server, "--concurrency", "1", "--num-prompts", "4", "--slo",
                 "ttft:p90<2000ms, attainment>=90%", "--capacity-search", "concurrency",
                 "--max-probes", "1", "--json", str(out))  # fmt: skip  # flag, value
    assert code == 0
    document = json.loads(out.read_text())
    capacity = document["capacity"]
    # The fake server answers every load within 2 s: the one probe doubles the load.
    assert (capacity["capacity"], capacity["probes"], capacity["stop_reason"]) == (
        2,
        1,
        "probes_exhausted",
    )
    probes = [level for level in document["levels"] if level.get("probe")]
    assert [level["concurrency"] for level in probes] == [2, 2]  # measured, then repeated
    # A capacity search's levels are steady: a window of max(4, 4 x C) requests and of the 29
    # that can show a p90 (and a 90 % attainment) met at 95 % confidence.
    assert [level["window"]["requests"] for level in document["levels"]] == [29, 29, 29]
    assert document["levels"][0]["slo"]["ttft_ms"]["percentile"] == 90
    assert "capacity at the SLOs: 2 users" in capsys.readouterr().out
