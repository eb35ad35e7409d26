"""A simulated run in the simulator's own time: a pure function of the job and its seeds, the
same on an idle machine and on one whose every core is busy; another noise seed is a
realistic re-run; without noise it is the offline prediction."""

from __future__ import annotations

import pytest

from agents.engines.base import PHASES
from agents.engines.sim.noise import NO_NOISE, NoiseModel, StepNoise, derived_seed
from agents.hardware import gpu_profile
from agents.loadgen.workload import config_from_workload
from agents.predict import OFFLINE_URL, predict_trial
from agents.runner.trial_engine import EngineOptions
from benchmarks.busy_machine import every_core_busy
from tests.agents.test_runner import make_job, run

IN_SIMULATED_TIME = EngineOptions()


def _job(
    noise_seed: int | None,
    trials=({"max_num_seqs": 8}, {"max_num_batched_tokens": 512, "max_num_seqs": 64}),
):
    job = make_job(list(trials), concurrency=(1, 8, 32), requests=48, output_len=64, speed=3)
    engine = job.engine.model_copy(update={"noise_seed": noise_seed})
    return job.model_copy(update={"engine": engine})


def _figures(recorder) -> list[dict]:
    """What a run reported, without the moments its messages were sent."""
    kept = ("trial_started", "cold_start_phase", "measurement", "trial_finished")
    return [
        {key: value for key, value in message.items() if key != "sent_at"}
        for message in recorder.messages
        if message["type"] in kept
    ]


@pytest.mark.slow
def test_it_gives_the_same_figures_on_an_idle_machine_and_a_busy_one(tmp_path):
    job = _job(noise_seed=11)
    summary, quiet, _ = run(job, tmp_path / "quiet", engine_options=IN_SIMULATED_TIME)
    assert summary.outcome == "succeeded"
    with every_core_busy():
        _, busy, _ = run(job, tmp_path / "busy", engine_options=IN_SIMULATED_TIME)
    assert _figures(quiet) == _figures(busy)
    measurements = quiet.of("measurement")
    assert len(measurements) == 6
    for measurement in measurements:
        assert measurement["result"]["simulated"] == {"speed": 1.0, "clock": "simulated"}
    # Start-up in the simulated GPU's seconds (about half a minute for an 8B-class model), not
    # the host's: the same phases, with their details, as the server's log would give.
    phases = {m["phase"]: m for m in quiet.of("cold_start_phase") if m["trial"] == 0}
    assert tuple(phases) == PHASES  # every phase vLLM goes through, in order
    assert 20 < phases["first_token"]["seconds"] < 60
    assert phases["kv_cache_sized"]["detail"]["kv_cache_tokens"] > 0


@pytest.mark.slow
def test_another_noise_seed_is_a_realistic_rerun(tmp_path):
    _, first, _ = run(_job(noise_seed=1), tmp_path / "a", engine_options=IN_SIMULATED_TIME)
    _, second, _ = run(_job(noise_seed=2), tmp_path / "b", engine_options=IN_SIMULATED_TIME)
    pairs = list(zip(first.of("measurement"), second.of("measurement"), strict=True))
    differ = 0
    for a, b in pairs:
        assert a["level"] == b["level"]
        x, y = a["result"]["output_throughput"], b["result"]["output_throughput"]
        differ += x != y
        assert abs(x - y) / x < 0.15  # a re-run, not another server
    assert differ == len(pairs)


@pytest.mark.slow
def test_without_noise_it_is_the_offline_prediction(tmp_path):
    job = _job(noise_seed=None, trials=({"max_num_seqs": 8},))
    _, recorder, _ = run(job, tmp_path, engine_options=IN_SIMULATED_TIME)
    config = config_from_workload(
        job.workload, base_url=OFFLINE_URL, model="tiny", slos=job.slos, seed=job.seed
    )
    predicted = predict_trial(job.model.facts(), gpu_profile("H100"), {"max_num_seqs": 8}, config)
    reported = [m["result"] for m in recorder.of("measurement")]
    assert len(reported) == len(predicted.levels) == 3
    for result, level in zip(reported, predicted.levels, strict=True):
        for key in ("completed", "output_throughput", "p99_ttft_ms", "median_tpot_ms"):
            assert result[key] == pytest.approx(level[key], rel=1e-9), key


def test_a_configuration_vllm_would_refuse_fails_with_its_class(tmp_path):
    job = _job(noise_seed=3, trials=({"gpu_memory_utilization": 0.03}, {"max_num_seqs": 4}))
    summary, recorder, _ = run(job, tmp_path, engine_options=IN_SIMULATED_TIME)
    finished = {m["trial"]: m for m in recorder.of("trial_finished")}
    assert finished[0]["outcome"] == "failed"
    assert finished[0]["failure_class"] == "oom_at_startup"
    assert "No available memory for the cache blocks" in finished[0]["log_tail"]
    assert finished[1]["outcome"] == "succeeded"
    assert (summary.trials_failed, summary.trials_succeeded) == (1, 1)


def test_step_noise_is_a_function_of_its_seed_alone():
    def durations(seed: int) -> list[float]:
        noise = StepNoise(seed)
        return [noise.duration(0.01 * step, 0.01) for step in range(20_000)]

    assert durations(5) == durations(5)
    assert durations(5) != durations(6)
    noise = StepNoise(5)
    steps = [noise.duration(0.01 * step, 0.01) for step in range(20_000)]
    # Jitter keeps the mean (times the pod's factor); stalls come at their rate, one at most
    # per step, over 200 simulated seconds.
    typical = sorted(steps)[len(steps) // 2]
    assert typical == pytest.approx(0.01 * noise.pod_factor, rel=0.02)
    assert 20 <= noise.stalls <= 60
    silent = StepNoise(5, NO_NOISE)
    assert [silent.duration(0.0, 0.01) for _ in range(3)] == [0.01] * 3
    assert NO_NOISE.silent and not NoiseModel().silent


def test_derived_seeds_name_their_use():
    assert derived_seed(1, {"a": 1, "b": 2}) == derived_seed(1, {"b": 2, "a": 1})
    assert derived_seed(1, {"a": 1}) != derived_seed(2, {"a": 1})
    assert derived_seed(1, {"a": 1}) != derived_seed(1, {"a": 2})
    assert 0 <= derived_seed(99, "x") < 2**63
