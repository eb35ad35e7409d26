"""An engine that dies at any moment of a trial: the real simulator is SIGKILLed (or frozen
with SIGSTOP: a hang) while a job of two trials × three levels runs, at moments picked from
the runner's own messages, a metrics scrape or the agent process's results folder (no
sleeps). Healed, it is started again once and the level it cut short runs again, every level
measured exactly once; not healed (no restarts left), it ends that trial only and the run
goes on to the next trial and ends normally. A connection failure while the engine still runs
is a failed trial of class ``other``, not a crash."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agents.loadgen.server_metrics import MetricsScraper
from agents.runner.summary import read_journal
from tests.agents.test_runner import FAST_STARTUP, NO_RESTARTS, make_job, run
from tests.polling import wait_for

pytestmark = pytest.mark.slow

LEVELS = (1, 2, 4)


def death_job(requests: int = 24):
    return make_job(
        [{"max_num_seqs": 8}, {"max_num_seqs": 4}],
        concurrency=LEVELS,
        requests=requests,
        output_len=64,
        speed=8.0,
    )


def kill_engine(runner) -> int:
    engine = runner._engine
    assert engine is not None and engine.pid, "the hook fires while an engine serves"
    os.kill(engine.pid, signal.SIGKILL)  # kill -9, as the operator did
    return engine.pid


def kill_once_on(trigger):
    """A runner ``setup`` that SIGKILLs trial 0's engine on the first message that
    ``trigger`` accepts; the pids killed are kept in ``killed``."""
    killed: list[int] = []

    def setup(runner, recorder):
        def hook(message):
            if not killed and message.get("trial") == 0 and trigger(message):
                killed.append(kill_engine(runner))

        recorder.hooks.append(hook)

    return setup, killed


def measured(recorder, trial: int) -> list[dict]:
    return [m for m in recorder.of("measurement") if m["trial"] == trial]


def progress_of(concurrency: int):
    # A level's first progress message goes out at its first finished request: the level has
    # just begun, with most of its requests to go.
    return lambda m: m["type"] == "level_progress" and m["level"]["concurrency"] == concurrency


@pytest.mark.parametrize(
    ("trigger", "intact", "cut_short"),
    [
        # Its start-up's last phase: the load generator's preflight finds it gone.
        (lambda m: m["type"] == "cold_start_phase" and m["phase"] == "first_token", 0, False),
        (progress_of(LEVELS[0]), 0, True),
        # The first level's measurement goes out while the load generator prepares the
        # second level (its prompts, its connections): the death falls between the two.
        (lambda m: m["type"] == "measurement" and m["level"]["concurrency"] == LEVELS[0], 1, True),
        (progress_of(LEVELS[1]), 1, True),
        # No later level finds it gone: only the requests it failed (and its exit) tell.
        (progress_of(LEVELS[2]), 2, True),
    ],
    ids=[
        "before_its_first_level",
        "during_its_first_level",
        "between_levels",
        "during_level_2",
        "during_its_last_level",
    ],
)
def test_it_ends_only_the_trial_whose_engine_dies(tmp_path, trigger, intact, cut_short):
    setup, killed = kill_once_on(trigger)
    summary, recorder, _ = run(death_job(), tmp_path, setup=setup, engine_options=NO_RESTARTS)
    assert killed
    # Trial 0: a crash with its log tail. The levels finished before the death are kept in
    # full; the level it cut short (if any) is reported as far as it got; nothing later runs.
    finished = {m["trial"]: m for m in recorder.of("trial_finished")}
    assert sorted(finished) == [0, 1]
    assert (finished[0]["outcome"], finished[0]["failure_class"]) == ("failed", "crash")
    assert "killed by signal 9" in finished[0]["log_tail"]
    mine = measured(recorder, 0)
    allowed = [list(LEVELS[:intact])] + ([list(LEVELS[: intact + 1])] if cut_short else [])
    assert [m["level"]["concurrency"] for m in mine] in allowed
    for measurement in mine[:intact]:
        result = measurement["result"]
        assert (result["completed"], result["failed"]) == (24, 0)
        assert "partial" not in result
    for measurement in mine[intact:]:
        result = measurement["result"]
        assert result.get("partial") or result["failed"] > 0, "the cut level says so"
    # Trial 1: every level, on its own engine.
    assert finished[1]["outcome"] == "succeeded"
    assert [m["level"]["concurrency"] for m in measured(recorder, 1)] == list(LEVELS)
    assert all(m["result"]["failed"] == 0 for m in measured(recorder, 1))
    # The run ends normally, not as an agent error.
    assert (summary.outcome, summary.reason) == ("succeeded", "")
    assert (summary.trials_succeeded, summary.trials_failed) == (1, 1)
    assert recorder.messages[-1] == {
        **recorder.messages[-1],
        "type": "run_finished",
        "outcome": "succeeded",
    }


def test_it_calls_a_death_in_the_last_levels_metrics_scrape_a_crash(tmp_path, monkeypatch):
    # Every request of the last level has finished; the engine dies as the level's closing
    # /metrics scrape starts, so only that scrape sees it go.
    finish = MetricsScraper.finish
    seen: dict = {}
    finishes: list[int] = []

    async def finish_after_a_death(scraper):
        runner = seen["runner"]
        if runner.current_trial == 0:
            finishes.append(1)
            if len(finishes) == len(LEVELS):
                kill_engine(runner)
        return await finish(scraper)

    monkeypatch.setattr(MetricsScraper, "finish", finish_after_a_death)
    summary, recorder, _ = run(
        death_job(),
        tmp_path,
        setup=lambda r, _: seen.update(runner=r),
        engine_options=NO_RESTARTS,
    )
    finished = {m["trial"]: m for m in recorder.of("trial_finished")}
    assert (finished[0]["outcome"], finished[0]["failure_class"]) == ("failed", "crash")
    mine = measured(recorder, 0)
    assert [m["level"]["concurrency"] for m in mine] == list(LEVELS)
    assert all(m["result"]["completed"] == 24 for m in mine)
    scrape_error = mine[-1]["server"]["last_scrape_error"]
    assert scrape_error.startswith(("connection_refused:", "stream_ended_early:")), scrape_error
    assert finished[1]["outcome"] == "succeeded"
    assert (summary.outcome, summary.trials_failed, summary.trials_succeeded) == (
        "succeeded",
        1,
        1,
    )


def test_it_keeps_the_agent_process_going_when_the_engine_is_killed(tmp_path):
    # As the operator saw it: the agent's own process (`benchsite-agent run`), its
    # simulator killed with kill -9 during the first of three levels, watched through the
    # results folder the agent writes as it goes.
    job = death_job(requests=120)  # a first level of about 2 s: the kill lands inside it
    (tmp_path / "job.json").write_text(job.model_dump_json())
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if key != "BENCHSITE_TOKEN"}
    env["BENCHSITE_SIM_OVER_HTTP"] = "1"  # a simulator process to kill
    command = [sys.executable, "-m", "agents.cli", "run", "--job", str(tmp_path / "job.json")]
    log = tmp_path / "agent.log"
    with log.open("w") as sink:
        agent = subprocess.Popen(
            [*command, "--workdir", str(out)],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:

        def engine_pid_once_level_1_runs() -> int | None:
            assert agent.poll() is None, log.read_text()
            journal = read_journal(out / "messages.jsonl")
            if not any(m["type"] == "level_progress" and m["trial"] == 0 for m in journal):
                return None
            (start,) = [
                m
                for m in journal
                if m["type"] == "cold_start_phase"
                and m["trial"] == 0
                and m["phase"] == "process_start"
            ]
            return start["detail"]["pid"]

        pid = wait_for(engine_pid_once_level_1_runs, 60, "trial 0's first level to run")
        os.kill(pid, signal.SIGKILL)
        agent.wait(timeout=120)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    output = log.read_text()
    assert agent.returncode == 0, output
    assert "2 trials succeeded, 0 failed, 0 skipped" in output
    assert "Traceback" not in output and "agent error" not in output
    journal = read_journal(out / "messages.jsonl")
    (restarted,) = [m for m in journal if m["type"] == "engine_restarted"]
    assert (restarted["trial"], restarted["attempt"], restarted["failure_class"]) == (0, 1, "crash")
    assert restarted["level"]["concurrency"] == LEVELS[0] and "signal 9" in restarted["log_tail"]
    finished = {m["trial"]: m for m in journal if m["type"] == "trial_finished"}
    assert finished[0]["outcome"] == finished[1]["outcome"] == "succeeded"
    for trial in (0, 1):
        measurements = [m for m in journal if m["type"] == "measurement" and m["trial"] == trial]
        # Every level once, in order, whole: the cut one measured again from its start.
        assert [m["level"]["concurrency"] for m in measurements] == list(LEVELS)
        assert all(m["result"]["failed"] == 0 for m in measurements)
        assert not any(m["result"].get("partial") for m in measurements)
    assert journal[-1]["type"] == "run_finished" and journal[-1]["outcome"] == "succeeded"


def test_a_restarted_engine_replays_the_cut_levels_traffic_and_keeps_the_rest(tmp_path):
    setup, killed = kill_once_on(progress_of(LEVELS[1]))
    summary, recorder, _ = run(death_job(), tmp_path, setup=setup)
    assert killed and summary.trials_succeeded == 2
    mine = measured(recorder, 0)
    assert [m["level"]["concurrency"] for m in mine] == list(LEVELS)
    # The same prompts in the same order as the other trial (which was never killed): the
    # re-run level is the level the load generator would have sent.
    theirs = measured(recorder, 1)
    for ours, other in zip(mine, theirs, strict=True):
        assert ours["result"]["completed"] == other["result"]["completed"] == 24
    (restarted,) = recorder.of("engine_restarted")
    assert restarted["level"]["concurrency"] == LEVELS[1]
    assert restarted["requests_lost"] >= 1


def test_a_second_death_fails_the_trial_and_the_run_goes_on(tmp_path):
    killed: list[int] = []

    def setup(runner, recorder):
        def hook(message):
            engine = runner._engine
            ours = message["type"] == "level_progress" and message["trial"] == 0
            if ours and engine is not None and engine.pid and engine.pid not in killed:
                killed.append(kill_engine(runner))

        recorder.hooks.append(hook)

    summary, recorder, _ = run(death_job(), tmp_path, setup=setup)
    assert len(killed) == 2
    assert [m["attempt"] for m in recorder.of("engine_restarted")] == [1]
    finished = {m["trial"]: m for m in recorder.of("trial_finished")}
    assert (finished[0]["outcome"], finished[0]["failure_class"]) == ("failed", "crash")
    assert finished[1]["outcome"] == "succeeded"
    assert summary.outcome == "succeeded"


def test_a_hung_engine_is_killed_started_again_and_its_level_measured_again(tmp_path):
    frozen: list[int] = []

    def setup(runner, recorder):
        def hook(message):
            if not frozen and message["type"] == "level_progress" and message["trial"] == 0:
                frozen.append(runner._engine.pid)
                os.killpg(runner._engine.pid, signal.SIGSTOP)  # alive, answering nothing

        recorder.hooks.append(hook)

    options = dataclasses.replace(FAST_STARTUP, hang_seconds=1.0)
    summary, recorder, _ = run(death_job(), tmp_path, setup=setup, engine_options=options)
    assert frozen and summary.trials_succeeded == 2
    (restarted,) = recorder.of("engine_restarted")
    assert restarted["failure_class"] == "hang" and "no token for" in restarted["log_tail"]
    assert [m["level"]["concurrency"] for m in measured(recorder, 0)] == list(LEVELS)
    with pytest.raises(ProcessLookupError):
        os.kill(frozen[0], 0)  # the hung engine is gone, not left frozen
