"""The agent runner with the simulator as its engine, served over HTTP in wall time (a stand-in
for vLLM's process and network): trials in order, failures recorded, deadline and cancel
obeyed, every message valid for the site. The simulator in its own time, as runs use it:
test_runner_simulated_time.py."""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import os
import signal
import threading
import time
import uuid

import pytest

from agents import protocol
from agents.loadgen import event_loop_runner
from agents.runner.runner import JobRunner
from agents.runner.trial_engine import EngineOptions

FAST_STARTUP = EngineOptions(sim_startup_speed=1000, startup_timeout=60, sim_over_http=True)
# For tests of what an engine's death does to its trial when nothing heals it.
NO_RESTARTS = dataclasses.replace(FAST_STARTUP, engine_restarts=0)


def make_job(
    trials: list[dict],
    *,
    concurrency=(1, 4),
    requests=8,
    output_len=16,
    speed=20.0,
    deadline_in: float = 600,
) -> protocol.JobSpec:
    return protocol.JobSpec(
        run_id=uuid.uuid4(),
        trials=[
            protocol.TrialSpec(index=index, serve_config=config)
            for index, config in enumerate(trials)
        ],
        workload=protocol.Workload(
            dataset=protocol.RandomDataset(input_len=64, output_len=output_len),
            concurrency=list(concurrency),
            requests_per_level=requests,
        ),
        # Judged at p50, whose window needs 5 completions (p99's needs 299): these tests are
        # about the runner, not about windows.
        slos=protocol.Slos(ttft_ms=5000, ttft_percentile=50),
        engine=protocol.EngineSpec(kind="sim", gpu_type="H100", gpu_count=1, sim_speed=speed),
        model=protocol.ModelSource(
            hf_repo="test/tiny-llama",
            served_model_name="tiny",
            parameter_count=1_000_000_000,
            num_layers=16,
            hidden_size=2048,
            num_attention_heads=16,
            num_kv_heads=4,
            head_dim=128,
            dtype="bfloat16",
            max_context=4096,
        ),
        deadline=datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=deadline_in),
    )


class Recorder:
    """The runner's ``emit``: keeps every message and lets a test react to one."""

    def __init__(self, job: protocol.JobSpec):
        self.job = job
        self.messages: list[dict] = []
        self.times: list[float] = []
        self.hooks = []
        self.lock = threading.Lock()

    def __call__(self, message: dict) -> None:
        with self.lock:
            self.messages.append(message)
            self.times.append(time.monotonic())
        for hook in self.hooks:
            hook(message)

    def of(self, kind: str) -> list[dict]:
        return [message for message in self.messages if message["type"] == kind]


def run(job: protocol.JobSpec, tmp_path, *, setup=None, **options):
    recorder = Recorder(job)
    runner = JobRunner(
        job,
        emit=recorder,
        workdir=tmp_path,
        engine_options=options.pop("engine_options", FAST_STARTUP),
        deadline_margin=0,
        **({"metrics_period": 0.1} | options),
    )
    if setup is not None:
        setup(runner, recorder)
    started = time.monotonic()
    with event_loop_runner() as loop:
        summary = loop.run(runner.run())
    return summary, recorder, time.monotonic() - started


@pytest.mark.slow
def test_two_trials_run_in_order_and_every_message_is_valid(tmp_path):
    job = make_job([{"max_num_seqs": 8}, {"max_num_seqs": 2}], output_len=64, speed=2)
    summary, recorder, _ = run(job, tmp_path)
    assert (summary.outcome, summary.trials_succeeded, summary.trials_failed) == ("succeeded", 2, 0)
    kinds = [message["type"] for message in recorder.messages]
    assert kinds[0] == "hello" and kinds[-1] == "run_finished"
    for seq, message in enumerate(recorder.messages):
        parsed = protocol.parse_agent_message({**message, "seq": seq})
        assert str(parsed.run_id) == str(job.run_id)
    # Per trial: started, its cold-start phases, one measurement per level, finished.
    for trial in (0, 1):
        mine = [
            m for m in recorder.messages if m.get("trial") == trial and m["type"] != "heartbeat"
        ]
        assert mine[0]["type"] == "trial_started"
        assert mine[0]["serve_config"] == job.trials[trial].serve_config
        assert "--max-num-seqs" in mine[0]["command"]
        phases = [m["phase"] for m in mine if m["type"] == "cold_start_phase"]
        assert "process_start" in phases and "health_ready" in phases
        measurements = [m for m in mine if m["type"] == "measurement"]
        assert [m["level"]["concurrency"] for m in measurements] == [1, 4]
        for measurement in measurements:
            result = measurement["result"]
            # Steady levels: the window holds max(8 requests, 4 x the concurrency).
            window = max(8, 4 * measurement["level"]["concurrency"])
            assert (result["completed"], result["failed"]) == (window, 0)
            assert result["window"]["requests"] == window
            assert result["total_output_tokens"] == window * 64
            assert result["simulated"] == {"speed": 2.0}
            assert measurement["server"]["num_requests_running"]["max"] >= 1
            assert "partial" not in result
        assert mine[-1] == {**mine[-1], "type": "trial_finished", "outcome": "succeeded"}
    started = [m["trial"] for m in recorder.of("trial_started")]
    assert started == [0, 1]
    # max_num_seqs=2 under 4 clients: the simulated server queues, and the measurement says so.
    second = [m for m in recorder.of("measurement") if m["trial"] == 1][-1]
    assert second["server"]["num_requests_running"]["max"] <= 2
    assert second["server"]["num_requests_waiting"]["max"] >= 1


@pytest.mark.slow
def test_a_failed_trial_is_recorded_with_its_class_and_the_run_goes_on(tmp_path):
    # 3% of an H100 leaves nothing for the KV cache after the weights: vLLM (and so the
    # simulator) refuses with "No available memory for the cache blocks".
    job = make_job(
        [{"gpu_memory_utilization": 0.03}, {"max_num_seqs": 4}],
        concurrency=(2,),
        requests=4,
    )
    summary, recorder, _ = run(job, tmp_path)
    finished = recorder.of("trial_finished")
    assert [(m["trial"], m["outcome"]) for m in finished] == [(0, "failed"), (1, "succeeded")]
    assert finished[0]["failure_class"] == "oom_at_startup"
    assert finished[0]["log_tail"]
    assert [m["trial"] for m in recorder.of("measurement")] == [1]
    assert summary.outcome == "succeeded" and summary.trials_failed == 1


@pytest.mark.slow
def test_a_config_the_schema_refuses_fails_its_trial_only(tmp_path):
    job = make_job([{"max_num_seqs": 4}], concurrency=(1,), requests=2)
    job.trials.insert(0, protocol.TrialSpec(index=5, serve_config={"no_such_flag": 1}))
    _, recorder, _ = run(job, tmp_path)
    finished = {m["trial"]: m for m in recorder.of("trial_finished")}
    assert finished[5]["failure_class"] == "unsupported_flag"
    assert "no_such_flag" in finished[5]["log_tail"]
    assert finished[0]["outcome"] == "succeeded"


@pytest.mark.slow
def test_the_deadline_ends_the_level_in_progress_and_skips_the_rest(tmp_path):
    # Each request lasts seconds at speed 1 (the first level minutes): the deadline falls
    # inside it, also when a busy machine (parallel test workers) slows the start-up down —
    # 30 s, as every deadline test (docs/testing.md): at 15 s a loaded CI machine once had
    # not started the level yet.
    deadline_in = 30
    job = make_job(
        [{"max_num_seqs": 8}, {"max_num_seqs": 4}],
        concurrency=(2, 4),
        requests=400,
        output_len=256,
        speed=1.0,
        deadline_in=deadline_in,
    )
    summary, recorder, elapsed = run(job, tmp_path)
    assert summary.outcome == "deadline"
    measurements = recorder.of("measurement")
    assert len(measurements) == 1
    result = measurements[0]["result"]
    assert result["partial"] is True and result["completed"] < 400
    finished = recorder.of("trial_finished")
    assert [(m["trial"], m["outcome"], m["failure_class"]) for m in finished] == [
        (0, "failed", "deadline"),
        (1, "skipped", "deadline"),
    ]
    assert recorder.messages[-1]["outcome"] == "deadline"
    # The stop is prompt: the engine is down and the run over well within the grace period.
    deadline_at = job.deadline.timestamp()
    assert recorder.messages[-1]["sent_at"] - deadline_at < 8
    assert elapsed < deadline_in + 15


@pytest.mark.slow
def test_a_stop_request_from_another_thread_ends_the_run_within_seconds(tmp_path):
    job = make_job(
        [{"max_num_seqs": 8}, {"max_num_seqs": 4}],
        concurrency=(2,),
        requests=400,
        output_len=256,
        speed=1.0,
    )
    asked = []

    def setup(runner, recorder):
        def cancel_on_first_progress(message):
            if message["type"] == "level_progress" and not asked:
                asked.append(time.monotonic())
                threading.Thread(
                    target=runner.request_stop, args=("cancelled", "test says stop")
                ).start()

        recorder.hooks.append(cancel_on_first_progress)

    summary, recorder, _ = run(job, tmp_path, setup=setup)
    assert summary.outcome == "cancelled" and summary.reason == "test says stop"
    finished = recorder.of("trial_finished")
    assert [(m["trial"], m["outcome"]) for m in finished] == [(0, "skipped"), (1, "skipped")]
    assert recorder.of("measurement")[0]["result"]["partial"] is True
    stopped_at = recorder.times[recorder.messages.index(recorder.of("run_finished")[0])]
    assert stopped_at - asked[0] < 10


@pytest.mark.slow
def test_an_engine_dying_mid_level_fails_its_trial_as_a_crash(tmp_path):
    job = make_job(
        [{"max_num_seqs": 8}, {"max_num_seqs": 4}],
        concurrency=(2,),
        requests=60,
        output_len=128,
        speed=4.0,
    )

    def setup(runner, recorder):
        def kill_on_first_progress(message):
            if message["type"] == "level_progress" and message["trial"] == 0:
                engine = runner._engine
                if engine is not None and engine.pid:
                    os.killpg(engine.pid, signal.SIGKILL)

        recorder.hooks.append(kill_on_first_progress)

    summary, recorder, _ = run(job, tmp_path, setup=setup, engine_options=NO_RESTARTS)
    finished = {m["trial"]: m for m in recorder.of("trial_finished")}
    assert finished[0]["outcome"] == "failed" and finished[0]["failure_class"] == "crash"
    assert finished[1]["outcome"] == "succeeded"
    assert summary.outcome == "succeeded" and summary.trials_failed == 1


@pytest.mark.slow
def test_progress_is_throttled_and_heartbeats_keep_coming(tmp_path):
    job = make_job([{"max_num_seqs": 8}], concurrency=(4,), requests=48, output_len=64, speed=4)
    _, recorder, elapsed = run(job, tmp_path, heartbeat_every=0.5, progress_every=0.5)
    progress = recorder.of("level_progress")
    assert progress, "a level of several seconds reports progress"
    times = [recorder.times[i] for i, m in enumerate(recorder.messages) if m in progress]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= 0.45 for gap in gaps)
    # A steady level counts to its window (48), its ramp's first wave and its drain (4 each).
    assert progress[-1]["requests_total"] == 48 + 2 * 4
    assert progress[-1]["requests_done"] <= 48 + 4 * 4
    assert progress[-1]["ttft_ms_p50"] is not None
    # Heartbeats keep coming through the level: no long silence. (Their count is not fixed:
    # each waits its period after the last was sent, so a starved loop sends fewer — CI's
    # 5 workers on 2 cores once saw 41 in 25.5 s.)
    beats = [recorder.times[i] for i, m in enumerate(recorder.messages) if m["type"] == "heartbeat"]
    assert len(beats) >= elapsed / 0.5 / 2
    assert max(b - a for a, b in itertools.pairwise(beats)) < 5.0  # 2.26 s seen on CI


@pytest.mark.parametrize("outcome", ["cancelled"])
def test_a_stop_before_the_run_starts_skips_every_trial(tmp_path, outcome):
    job = make_job([{"max_num_seqs": 8}, {"max_num_seqs": 4}])
    summary, recorder, _ = run(
        job, tmp_path, setup=lambda runner, _: runner.request_stop(outcome, "early")
    )
    assert summary.outcome == outcome and summary.trials_skipped == 2
    assert not recorder.of("trial_started")


@pytest.mark.slow
def test_every_trial_is_sent_the_runs_traffic_and_searches_its_capacity(tmp_path, monkeypatch):
    import agents.runner.level_measuring as level_measuring

    seen: list[dict] = []
    real_run_bench = level_measuring.run_bench

    async def recording_run_bench(config, **options):
        async for event in real_run_bench(config, **options):
            if type(event).__name__ == "LevelFinished":
                seen.append(
                    {
                        "seed": config.seed,
                        "level": event.as_json().get("concurrency"),
                        "traffic": [r.prompt_sha for r in event.records],
                    }
                )
            yield event

    monkeypatch.setattr(level_measuring, "run_bench", recording_run_bench)
    job = make_job([{"max_num_seqs": 64}, {"max_num_seqs": 2}], concurrency=(1,), requests=4)
    job = job.model_copy(
        update={
            "seed": 4242,
            "workload": job.workload.model_copy(
                update={"capacity": protocol.CapacitySearch(max_probes=2, max_load=4)}
            ),
        }
    )
    summary, recorder, _ = run(job, tmp_path)
    assert summary.trials_succeeded == 2
    assert {entry["seed"] for entry in seen} == {4242}
    # The first level of both trials: the same prompts in the same order.
    first_levels = [entry for entry in seen if entry["level"] == 1][:1] + [
        entry for entry in seen if entry["level"] == 1
    ][-1:]
    shared = min(len(entry["traffic"]) for entry in first_levels)
    assert first_levels[0]["traffic"][:shared] == first_levels[1]["traffic"][:shared]
    for finished in recorder.of("trial_finished"):
        capacity = finished["capacity"]
        assert capacity["axis"] == "concurrency" and capacity["probes"] <= 2
        probes = [
            m
            for m in recorder.of("measurement")
            if m["trial"] == finished["trial"] and m["result"].get("probe")
        ]
        assert len(probes) == capacity["probes"] + capacity["repeats"]
        if capacity["capacity"] is not None:
            assert capacity["output_throughput"] > 0


@pytest.mark.slow
def test_a_simulated_rate_is_a_rate_of_the_modelled_hardware(tmp_path):
    # At speed 20 the simulator's second lasts 50 ms: 4 req/s of the modelled GPU are sent as
    # 80 req/s of wall time, and reported as 4 again.
    job = make_job([{"max_num_seqs": 64}], concurrency=(1,), requests=24)
    workload = protocol.Workload.model_validate(
        job.workload.model_dump() | {"concurrency": [], "request_rates": [4.0]}
    )
    job = job.model_copy(update={"workload": workload})
    summary, recorder, _ = run(job, tmp_path)
    assert summary.trials_succeeded == 1
    (measurement,) = recorder.of("measurement")
    assert measurement["level"]["request_rate"] == 4.0
    assert measurement["result"]["request_rate"] == 4.0
    assert 2.0 < measurement["result"]["whole_level"]["request_throughput"] < 8.0
