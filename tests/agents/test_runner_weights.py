"""The runner fetches a job's weights once, from a fake Hugging Face hub, and serves every
trial from the cache with the hub offline (``vllm serve REPO --revision REV``, as deployed);
weights it cannot have fail the run before any vLLM starts."""

from __future__ import annotations

import datetime
import json
import sys
import uuid
from pathlib import Path

import pytest

from agents import protocol
from agents.loadgen import event_loop_runner
from agents.runner.runner import JobRunner
from agents.runner.trial_engine import EngineOptions
from tests.agents.test_weights import TOKEN, model_source, repo_folder
from tests.fakes.hf_hub import FakeHub

FAKE_VLLM = (sys.executable, str(Path(__file__).with_name("fake_vllm_serve.py")))


@pytest.fixture
def hub(tmp_path):
    hub = FakeHub().start()
    folder = repo_folder(tmp_path / "source")
    hub.add_folder("org/open", folder)
    hub.add_folder("org/gated", folder, gated_token=TOKEN)
    yield hub
    hub.stop()


def vllm_job(repo: str, trials: int = 2) -> protocol.JobSpec:
    return protocol.JobSpec(
        run_id=uuid.uuid4(),
        trials=[
            protocol.TrialSpec(index=index, serve_config={"max_num_seqs": 4 + index})
            for index in range(trials)
        ],
        workload=protocol.Workload(
            dataset=protocol.RandomDataset(input_len=16, output_len=4),
            concurrency=[1],
            requests_per_level=4,
        ),
        engine=protocol.EngineSpec(kind="vllm", gpu_type="H100", gpu_count=1),
        model=model_source(repo),
        deadline=datetime.datetime.now(datetime.UTC) + datetime.timedelta(minutes=10),
    )


def run(job, tmp_path, hub, **options):
    messages: list[dict] = []
    hub_requests_at_start: dict[int, int] = {}

    def emit(message: dict) -> None:
        if message["type"] == "trial_started":
            hub_requests_at_start[message["trial"]] = len(hub.requests)
        messages.append(message)

    engine_options = EngineOptions(
        vllm_command=FAKE_VLLM,
        vllm_env={"FAKE_VLLM_LINE_DELAY": "0.005"},
        startup_timeout=60,
        weights_dir=tmp_path / "weights",
        hub_endpoint=hub.url,
        **options,
    )
    runner = JobRunner(
        job, emit=emit, workdir=tmp_path / "work", engine_options=engine_options, deadline_margin=0
    )
    with event_loop_runner() as loop:
        summary = loop.run(runner.run())
    return summary, messages, hub_requests_at_start, runner


def of(messages, kind):
    return [m for m in messages if m["type"] == kind]


@pytest.mark.slow
def test_the_first_trial_downloads_and_every_trial_serves_the_cache_offline(tmp_path, hub):
    summary, messages, asked_at_start, runner = run(vllm_job("org/open"), tmp_path, hub)
    assert (summary.outcome, summary.trials_succeeded) == ("succeeded", 2)
    phases = [m for m in of(messages, "cold_start_phase") if m["phase"] == "weights_downloaded"]
    assert [m["trial"] for m in phases] == [0]
    detail = phases[0]["detail"]
    assert detail["bytes"] == hub.bytes_served > 100_000 and detail["cached"] is False
    assert detail["commit"] == hub.repos["org/open"].sha and detail["mb_per_s"] > 0
    # Only what vLLM loads came down: not the .bin copy, not original/, not the README.
    fetched = sorted(r.path.rsplit("/", 1)[1] for r in hub.file_requests())
    assert "pytorch_model.bin" not in fetched and "README.md" not in fetched
    assert not any("original" in r.path for r in hub.requests)
    # The second trial asked the hub nothing.
    assert len(hub.requests) == asked_at_start[1]
    # Served as a deployment serves it: the repository at its revision, not a folder.
    for started in of(messages, "trial_started"):
        command = started["command"]
        assert command[len(FAKE_VLLM) : len(FAKE_VLLM) + 3] == ["org/open", "--revision", "main"]
    snapshot = tmp_path / "weights" / "hub" / "models--org--open" / "snapshots" / detail["commit"]
    for trial in (0, 1):
        log = (tmp_path / "work" / f"trial-{trial}" / "vllm.log").read_text()
        assert f"Starting to load model {snapshot}" in log
    assert runner.tokenizer is None  # this repository ships no tokenizer.json


@pytest.mark.slow
def test_a_later_run_on_the_same_volume_finds_the_weights_warm(tmp_path, hub):
    run(vllm_job("org/open", trials=1), tmp_path, hub)
    served = hub.bytes_served
    summary, messages, _, _ = run(vllm_job("org/open", trials=1), tmp_path, hub)
    assert summary.outcome == "succeeded" and hub.bytes_served == served
    (phase,) = [m for m in of(messages, "cold_start_phase") if m["phase"] == "weights_downloaded"]
    assert phase["detail"]["bytes"] == 0 and phase["detail"]["cached"] is True


@pytest.mark.parametrize("token", [None, "hf_notTheRightTokenAtAll"])
def test_a_refused_token_fails_the_run_before_any_vllm_starts(tmp_path, hub, token):
    summary, messages, _, _ = run(vllm_job("org/gated"), tmp_path, hub, hf_token=token)
    assert summary.outcome == "failed" and "org/gated is gated" in summary.reason
    first, second = of(messages, "trial_finished")
    assert (first["outcome"], first["failure_class"]) == ("failed", "model_access_denied")
    assert "org/gated" in first["log_tail"]
    assert second["outcome"] == "skipped"
    assert not (tmp_path / "work" / "trial-0" / "vllm.log").exists()
    assert hub.bytes_served == 0
    if token:
        assert token not in json.dumps(messages)


@pytest.mark.slow
def test_the_right_token_downloads_and_never_appears_in_a_message(tmp_path, hub):
    summary, messages, _, _ = run(vllm_job("org/gated", trials=1), tmp_path, hub, hf_token=TOKEN)
    assert summary.outcome == "succeeded"
    assert all(r.with_token for r in hub.file_requests())
    assert TOKEN not in json.dumps(messages)


def test_too_little_disk_fails_with_the_numbers_and_downloads_nothing(tmp_path, hub):
    summary, messages, _, _ = run(vllm_job("org/open"), tmp_path, hub, disk_reserve_bytes=2**60)
    first = of(messages, "trial_finished")[0]
    assert first["failure_class"] == "disk_too_small"
    assert "more on" in first["log_tail"] and "free" in first["log_tail"]
    assert summary.outcome == "failed" and hub.bytes_served == 0


def adapter_folder(root: Path) -> Path:
    """A LoRA adapter as the hub holds one (PEFT's files) and a README."""
    folder = root / "adapter"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text('{"peft_type": "LORA", "r": 8}')
    (folder / "adapter_model.safetensors").write_bytes(b"lora" * 1000)
    (folder / "README.md").write_text("# an adapter")
    return folder


@pytest.mark.slow
def test_lora_adapters_come_with_the_weights_and_requests_spread_over_them(tmp_path, hub):
    hub.add_folder("org/sql-lora", adapter_folder(tmp_path / "sql"))
    hub.add_folder("org/chat-lora", adapter_folder(tmp_path / "chat"))
    adapters = [
        protocol.LoraAdapter(name="sql", hf_repo="org/sql-lora", revision="main"),
        protocol.LoraAdapter(name="chat", hf_repo="org/chat-lora", revision="main"),
    ]
    job = vllm_job("org/open", trials=1)
    job = job.model_copy(update={"model": job.model.model_copy(update={"lora_adapters": adapters})})
    summary, messages, _, _ = run(job, tmp_path, hub)
    assert summary.outcome == "succeeded", summary.reason
    (phase,) = [m for m in of(messages, "cold_start_phase") if m["phase"] == "weights_downloaded"]
    companions = phase["detail"]["companions"]
    assert [c["repo"] for c in companions] == ["org/sql-lora", "org/chat-lora"]
    assert all(c["commit"] == hub.repos[c["repo"]].sha for c in companions)
    fetched = {r.path.rsplit("/", 1)[1] for r in hub.file_requests()}
    assert "adapter_model.safetensors" in fetched and "README.md" not in fetched
    # Served from their snapshots (a link by name, known before the download), all adapters
    # in a batch at once.
    (started,) = of(messages, "trial_started")
    command = started["command"]
    links = tmp_path / "weights" / "lora"
    lora_at = command.index("--enable-lora")
    assert command[lora_at:] == [
        "--enable-lora", "--lora-modules", f"sql={links / 'sql'}", f"chat={links / 'chat'}",
        "--max-loras", "2",
    ]  # fmt: skip  # flag, value
    snapshots = tmp_path / "weights" / "hub"
    sql = snapshots / "models--org--sql-lora" / "snapshots" / companions[0]["commit"]
    assert (links / "sql").resolve() == sql.resolve()
    log = (tmp_path / "work" / "trial-0" / "vllm.log").read_text()
    assert f"Loaded new LoRA adapter: name 'chat', path '{links / 'chat'}'" in log
    # Every request asked for an adapter the server serves (another name gets a 404), in
    # turn: the level records the spread.
    (measured,) = of(messages, "measurement")
    result = measured["result"]
    assert result["failed"] == 0
    # Over every request the level sent (its steady window's figures are of fewer).
    assert result["lora_requests"] == {"sql": 3, "chat": 2}


@pytest.mark.slow
def test_a_speculative_draft_model_comes_with_the_weights(tmp_path, hub):
    hub.add_folder("org/draft", repo_folder(tmp_path / "draft"))
    draft = {
        "method": "eagle",
        "num_speculative_tokens": 2,
        "model": "org/draft",
        "revision": "main",
    }
    job = vllm_job("org/open", trials=1)
    trial = protocol.TrialSpec(index=0, serve_config={"speculative_config": draft})
    summary, messages, _, _ = run(job.model_copy(update={"trials": [trial]}), tmp_path, hub)
    assert summary.outcome == "succeeded", summary.reason
    (phase,) = [m for m in of(messages, "cold_start_phase") if m["phase"] == "weights_downloaded"]
    assert [c["repo"] for c in phase["detail"]["companions"]] == ["org/draft"]
    assert (tmp_path / "weights" / "hub" / "models--org--draft" / "refs" / "main").is_file()
