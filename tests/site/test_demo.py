"""``make demo``'s main job, as a user runs it: embedded defaults (SQLite, no Redis, no
broker), the site served by Daphne, the demo experiment through run_start, the provisioning
task, the local agent and the simulator, and the final table. About a minute (the simulator
at 50x the H100 it models; `make demo` runs it at 8x, about 2.5 minutes)."""

from __future__ import annotations

from tests.demo_process import manage, migrated_demo_env

from .live_server import free_port


def test_the_demo_runs_the_demo_experiment_end_to_end(tmp_path):
    env = migrated_demo_env(tmp_path, columns=100)
    port = free_port()
    # Fast: the path and the tables printed are what this tests, not the simulator's figures.
    demo = manage(
        "demo_run", "--exit", "--port", str(port), "--sim-speed", "50", env=env, timeout=900
    )
    out = demo.stdout
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "Run succeeded" in out
    assert "SIMULATED" in out
    tables = out.split("Capacity at the SLOs")
    assert len(tables) == 2, out[-3000:]
    levels = [line for line in tables[0].splitlines() if line.startswith("│")]
    # 3 values of max_num_batched_tokens and vLLM's defaults × 3 fixed concurrency levels,
    # and the probes (*) of each configuration's capacity search.
    fixed = [row for row in levels if "*" not in row]
    assert len(fixed) == 12, out[-3000:]
    assert all("$" in row for row in levels)  # a cost per 1M output tokens on every row
    capacities = [line for line in tables[1].splitlines() if line.startswith("│")]
    assert len(capacities) == 4, out[-3000:]
    assert any("default" in row for row in capacities)
    # The answer: the recommended configuration, its capacity, the cost there and its margin.
    words = " ".join(out.split())  # rich wraps long lines
    assert "Answer (simulated H100" in words or "No configuration met the SLOs" in words
    if "Answer (simulated H100" in words:
        assert "concurrent users within ttft:p99<500ms, tpot:p99<50ms" in words
        assert "vllm serve meta-llama/Llama-3.1-8B-Instruct" in words
    assert "Password:" in out
    # Every address printed is where the demo serves, not a default port.
    assert f"Sign in:  http://127.0.0.1:{port}/login/" in out
    assert "127.0.0.1:8000" not in out
    assert f"Run page:   http://127.0.0.1:{port}/o/demo/runs/" in out
