"""Agentic coding sessions (issue 19): a session JSONL file read or refused by line and
field; sessions synthesized with a shared system prompt, growing context and sub-agents
that fan out and are waited for; replayed with their dependencies against the fake server."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.cli import main
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen import AgenticPrompts, BenchConfig
from agents.loadgen.workload import agentic_prompts, prompt_source
from agents.predict import OfflineBench
from agents.protocol import Workload
from agents.workloads import TraceError
from agents.workloads.agentic import SessionShape, parse_agentic, synthesize_sessions
from tests.agents.fake_openai_server import FakeServer
from tests.agents.test_loadgen_steady import bench as steady_bench
from tests.agents.test_predict import in_simulated_time, live_on_the_simulator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "agentic.jsonl"
ROOT = {"session": "s", "id": "a", "input_length": 10, "output_length": 2}


def lines(*items: dict) -> bytes:
    return "".join(json.dumps(item) + "\n" for item in items).encode()


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def test_the_example_file_has_two_sessions_with_a_fan_out_and_a_join():
    trace = parse_agentic(EXAMPLE.read_bytes())
    first, second = trace.sessions
    assert (first.start, second.start, trace.requests) == (0.0, 2.0, 8)
    assert [r.parents for r in first.requests] == [(), (0,), (1,), (1,), (2, 3)]
    assert [r.kind for r in first.requests] == ["main", "main", "subagent", "subagent", "main"]
    assert first.requests[1].delay == 1.2 and second.requests[0].delay == 0.0
    assert trace.mean_rate == 0.5


@pytest.mark.parametrize(
    ("second", "field", "words"),
    [
        ({"id": "b"}, "session", "missing"),
        (ROOT | {"id": "a"}, "id", "used by an earlier line"),
        (ROOT | {"id": "b", "parent": "zz"}, "parent", "not the id of an earlier line"),
        (ROOT | {"id": "b", "session": "t", "parent": "a"}, "parent", "another session"),
        (ROOT | {"id": "b", "parent": ["a", 3.5]}, "parent", "3.5"),
        (ROOT | {"id": "b", "delay_ms": -1}, "delay_ms", "-1"),
        (ROOT | {"id": "b", "output_length": 0}, "output_length", "got 0"),
        (ROOT | {"id": "b", "hash_ids": [1, 2]}, "hash_ids", "fill only 1"),
        (ROOT | {"id": "b", "type": ""}, "type", "label"),
        (ROOT | {"id": True}, "id", "true"),
    ],
)
def test_a_bad_line_is_refused_by_line_and_field(second, field, words):
    with pytest.raises(TraceError) as caught:
        parse_agentic(lines(ROOT, second))
    assert (caught.value.line, caught.value.field) == (2, field)
    assert words in str(caught.value)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_any_bytes_give_sessions_or_a_trace_error(data):
    with contextlib.suppress(TraceError):
        parse_agentic(data)


SHAPE = SessionShape(
    min_turns=3,
    max_turns=5,
    system_len=1000,
    task_len=100,
    output_len=50,
    tool_output_len=200,
    tool_seconds=0.01,
    subagent_probability=0.5,
    subagents=2,
    subagent_turns=2,
    block_size=64,
)


def test_synthesized_sessions_share_the_system_prompt_and_grow_their_context():
    trace = synthesize_sessions(SHAPE, 6, random.Random(2))
    assert trace == synthesize_sessions(SHAPE, 6, random.Random(2))
    shared = 1000 // 64
    for session in trace.sessions:
        mains = [r for r in session.requests if r.kind == "main"]
        assert 3 <= len(mains) <= 5
        assert [r.input_len for r in mains] == [1100 + 250 * k for k in range(len(mains))]
        for earlier, later in itertools.pairwise(mains):
            # The context grows: the next turn's blocks extend the last turn's.
            assert later.hash_ids[: len(earlier.hash_ids)] == earlier.hash_ids
        for request in session.requests:
            assert request.hash_ids[:shared] == tuple(range(shared))
            assert len(request.hash_ids) == -(-request.input_len // 64)
    # Someone fanned out: two chains of two sub-agent turns, joined by the next main turn.
    fans = [
        (index, r)
        for s in trace.sessions
        for index, r in enumerate(s.requests)
        if len(r.parents) == 2
    ]
    assert fans and all(r.kind == "main" for _, r in fans)
    subagent_tasks = {
        r.hash_ids[shared] for s in trace.sessions for r in s.requests if r.kind == "subagent"
    }
    assert len(subagent_tasks) >= 2  # each sub-agent its own task


@pytest.mark.slow
def test_a_replay_waits_for_parents_and_runs_sub_agents_side_by_side(server, tmp_path):
    source = agentic_prompts(EXAMPLE)
    (finished,) = steady_bench(
        server,
        source=source,
        levels=({"concurrency": 2},),
        model="fake?ttft_ms=5&itl_ms=1",
        num_prompts=8,
        seed=4,
        slos=None,
        steady_multiple=None,
    )
    records = {(r.session, r.turn): r for r in finished.records}
    assert all(r.success for r in records.values())
    sessions = [source.trace.sessions[n % 2] for n in range(1 + max(r[0] for r in records))]
    assert all((0, turn) in records for turn in range(1, 6))  # session 0 ran to its end
    for (number, turn), record in records.items():
        request = sessions[number].requests[turn - 1]
        assert record.expected_prompt_len == request.input_len
        for parent in request.parents:
            waited = record.start - records[(number, parent + 1)].finished
            assert waited >= request.delay - 0.002
    a, b = records[(0, 3)], records[(0, 4)]  # the two sub-agents of session 0
    assert a.start < b.finished and b.start < a.finished  # at the same time


@pytest.mark.slow
def test_an_open_loop_level_starts_the_files_sessions_at_their_scaled_times(server):
    (finished,) = steady_bench(
        server,
        source=agentic_prompts(EXAMPLE),
        levels=({"request_rate": 4.0},),
        model="fake?ttft_ms=5&itl_ms=1",
        num_prompts=8,
        seed=4,
        slos=None,
    )
    roots = sorted(r.scheduled for r in finished.records if r.turn == 1)
    assert roots == pytest.approx([0.0, 0.25])  # 2 s apart at 0.5/s, so 0.25 s at 4/s
    assert finished.as_json()["send_lateness"]["max_ms"] >= 0
    assert finished.as_json()["completed"] == 8


def test_nothing_follows_a_failed_request(server):
    (finished,) = steady_bench(
        server,
        source=agentic_prompts(EXAMPLE),
        levels=({"concurrency": 2},),
        model="fake?mode=http500",
        num_prompts=8,
        seed=4,
        slos=None,
        steady_multiple=None,
    )
    # Only the sessions' roots were sent: every other request waits for a failed one.
    assert all(r.turn == 1 for r in finished.records)


def test_synthesized_sessions_run_closed_loop(server):
    source = AgenticPrompts(shape=SHAPE)
    (finished,) = steady_bench(
        server,
        source=source,
        levels=({"concurrency": 3},),
        model="fake?ttft_ms=2&itl_ms=1",
        num_prompts=30,
        seed=4,
        slos=None,
        steady_multiple=1.0,
    )
    assert finished.as_json()["failed"] == 0 and len(finished.records) >= 30
    assert finished.as_json()["window"]["requests"] >= 30


def test_a_workload_names_synthesized_or_uploaded_sessions(tmp_path):
    workload = Workload.model_validate(
        {"dataset": {"kind": "agentic", "max_turns": 6, "subagents": 0}, "concurrency": [2]}
    )
    source = prompt_source(workload)
    assert source.shape.max_turns == 6 and source.trace is None
    assert workload.dataset.longest_context() == 8000 + 500 + 5 * 1800 + 300
    uploaded = Workload.model_validate(
        {
            "dataset": {
                "kind": "agentic_trace",
                "dataset_id": "6f1e2a3b-0000-4000-8000-000000000000",
            },
            "request_rates": [1],
        }
    )
    assert prompt_source(uploaded, dataset_path=EXAMPLE).trace.requests == 8


@pytest.mark.slow
def test_bench_takes_synthesized_and_uploaded_sessions(server, tmp_path, capsys):
    out = tmp_path / "out.json"
    base = ["bench", "--base-url", server.base_url, "--model", "fake?ttft_ms=1&itl_ms=1"]
    assert main([*base, "--dataset", f"agentic_trace:{EXAMPLE}", "--concurrency", "2",
                 "--num-prompts", "8", "--json", str(out)]) == 0  # fmt: skip  # flag, value
    assert json.loads(out.read_text())["levels"][0]["completed"] == 8
    assert main([*base, "--dataset", 'agentic:{"min_turns": 2, "max_turns": 3, "system_len": 200}',
                 "--concurrency", "2", "--num-prompts", "6"]) == 0  # fmt: skip  # flag, value
    assert main([*base, "--dataset", 'agentic:{"max_turns": 0}', "--concurrency", "1"]) == 2
    assert "max_turns" in capsys.readouterr().err


def offline_levels(source, levels, **fields):
    config = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=source,
        levels=levels,
        metrics_url=None,
        **({"num_prompts": 40} | fields),
    )
    scheduler = make_scheduler(MODEL_PRESETS["llama-3.1-8b"].facts, gpu_profile("H100"), {})
    return OfflineBench(config, scheduler).run().levels


def test_the_simulator_offline_replays_dependencies_and_caches_the_shared_context():
    source = AgenticPrompts(shape=SHAPE)
    (level,) = offline_levels(source, ({"concurrency": 4},))
    assert level["completed"] >= 40 and level["failed"] == 0
    # Every request shares the system prompt's 15 full blocks of 64 (after the first), and
    # each main turn its whole last context: most prompt tokens come from the cache.
    assert level["server"]["prefix_cache_hit_rate"] > 0.6
    (uploaded,) = offline_levels(agentic_prompts(EXAMPLE), ({"request_rate": 1.0},), num_prompts=8)
    assert uploaded["completed"] == 8
    # At 1 session/s the file's 2 s between sessions becomes 1 s; B3 waits 2.5 s after B2.
    assert uploaded["duration"] > 1.0 + 0.8 + 2.5


@pytest.mark.slow
def test_offline_and_live_agentic_sessions_on_the_simulator_agree(tmp_path):
    source = AgenticPrompts(shape=SHAPE)
    config = BenchConfig(
        base_url="http://replaced",
        model="m",
        source=source,
        levels=({"concurrency": 4},),
        num_prompts=40,
        metrics_url="auto",
    )
    (live,) = live_on_the_simulator(config, tmp_path)
    (predicted,) = offline_levels(source, ({"concurrency": 4},))
    assert predicted["completed"] == live["completed"]
    assert predicted["total_input_tokens"] == live["total_input_tokens"]
    assert predicted["server"]["prefix_cache_hits"] == pytest.approx(
        live["server"]["prefix_cache_hits"], rel=0.1
    )
    for key in ("median_tpot_ms", "output_throughput"):
        assert predicted[key] == pytest.approx(in_simulated_time(live, key), rel=0.15), key
