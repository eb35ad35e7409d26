"""Trace replay (issue 19): a trace's requests become prompts that share exactly the blocks
its hash ids share; an open-loop level sends each request once at the trace's times scaled
to the level's rate and reports its send lateness; a closed-loop level sends them in order;
the simulator offline replays the same schedule and its prefix cache hits what the hash ids
share; the command line takes a trace file."""

from __future__ import annotations

import itertools
import json
import math
import random
import uuid
from pathlib import Path

import pytest

from agents.cli import main
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen import BenchConfig, LevelFinished, TracePrompts
from agents.loadgen.workload import config_from_workload, trace_prompts
from agents.predict import OfflineBench
from agents.protocol import LevelResult, Workload
from agents.workloads import Trace, TraceRequest
from tests.agents.fake_openai_server import FakeServer
from tests.agents.test_loadgen_steady import bench as steady_bench

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"


def validated(result: dict | LevelResult) -> LevelResult:
    """A level as the protocol reads it (the server report travels in a message of its own)."""
    if isinstance(result, LevelResult):
        return result  # the load generator's own
    return LevelResult.model_validate({k: v for k, v in result.items() if k != "server"})


def trace(*requests: TraceRequest, block_size: int = 4) -> TracePrompts:
    return TracePrompts(Trace("mooncake", requests, block_size))


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def bench(server, source, levels, **overrides) -> list[LevelFinished]:
    settings = {"model": "fake?ttft_ms=2&itl_ms=1", "num_prompts": 3, "seed": 5, "slos": None}
    return steady_bench(server, source=source, levels=levels, **(settings | overrides))


def test_requests_sharing_hash_ids_share_exactly_those_blocks():
    source = trace(
        TraceRequest(0.0, 10, 3, (7, 8)),
        TraceRequest(0.5, 9, 4, (7, 9)),
        TraceRequest(1.0, 6, 5, (8,)),
        TraceRequest(1.5, 3, 6, (7,)),
    )
    prompts = source.sample(4, random.Random(1))
    words = [prompt.text.split() for prompt in prompts]
    assert [len(w) for w in words] == [10, 9, 6, 3]
    assert [(p.prompt_len, p.output_len) for p in prompts] == [(10, 3), (9, 4), (6, 5), (3, 6)]
    block_7, block_8 = words[0][:4], words[0][4:8]
    assert words[1][:4] == block_7 and words[1][4:8] != block_8  # block 9, not 8
    assert words[2][:4] == block_8  # the same block wherever a request holds it
    assert words[3] == block_7[:3]  # a request shorter than its block takes its start
    assert words[0][8:] != words[1][8:]  # what no hash id names is the request's own


def test_each_draw_gets_fresh_blocks_and_the_same_seed_the_same_ones():
    source = trace(TraceRequest(0.0, 8, 1, (1, 2)))
    first, again = source.sample(1, random.Random(3)), source.sample(1, random.Random(3))
    other = source.sample(1, random.Random(4))
    assert first == again
    assert first[0].text.split()[:8] != other[0].text.split()[:8]


def test_a_longer_count_cycles_through_the_trace_in_order():
    source = trace(TraceRequest(0.0, 2, 1), TraceRequest(1.0, 3, 2), TraceRequest(2.0, 4, 3))
    lengths = [p.prompt_len for p in source.sample(7, random.Random(0))]
    assert lengths == [2, 3, 4, 2, 3, 4, 2]


def test_offsets_are_the_traces_times_scaled_to_the_rate():
    source = trace(*(TraceRequest(float(t), 1, 1) for t in (0, 1, 3, 4)))
    assert source.trace.mean_rate == 0.75
    assert source.offsets(1.5) == [0.0, 0.5, 1.5, 2.0]
    assert source.time_scale(0.75) == 1.0
    assert source.offsets(math.inf) == [0.0] * 4
    assert trace(TraceRequest(0.0, 1, 1)).time_scale(3.0) is None


def test_an_open_loop_level_replays_every_request_once_at_its_scaled_time(server):
    requests = [TraceRequest(t / 10, 5 + t, 2 + t % 3) for t in (0, 1, 2, 4, 8, 9, 12, 16)]
    source = trace(*requests)
    (finished,) = bench(server, source, ({"request_rate": 50.0},))
    records = finished.records
    # Not cut to num_prompts (3), not steady: the whole window, once, in order.
    assert len(records) == 8 and finished.as_json()["completed"] == 8
    assert [r.requested_output_len for r in records] == [r.output_len for r in requests]
    assert [r.scheduled for r in records] == pytest.approx(source.offsets(50.0))
    assert max(r.scheduled for r in records) == pytest.approx(1.6 * (7 / 1.6) / 50)
    result = validated(finished.result)
    assert result.window is None
    assert result.replay.requests == 8
    assert result.replay.trace_rate == pytest.approx(7 / 1.6)
    assert result.replay.time_scale == pytest.approx(7 / 1.6 / 50)
    lateness = result.send_lateness
    assert 0 <= lateness.p50_ms <= lateness.p99_ms <= lateness.max_ms < 1000
    # Every request left between its schedule and max_ms after it: the gaps between sends
    # are the scheduled gaps to within that.
    for before, after in itertools.pairwise(records):
        drift = (after.start - before.start) - (after.scheduled - before.scheduled)
        assert abs(drift) * 1000 <= lateness.max_ms + 1e-6


def test_a_closed_loop_level_sends_the_traces_requests_in_order(server):
    requests = [TraceRequest(float(t), 3 + t, 2) for t in range(5)]
    (finished,) = bench(server, trace(*requests), ({"concurrency": 1},), steady_multiple=None)
    assert [r.expected_prompt_len for r in finished.records] == [3, 4, 5]  # num_prompts
    result = validated(finished.result)
    assert result.send_lateness is None
    assert (result.replay.requests, result.replay.time_scale) == (5, None)


@pytest.mark.slow
def test_a_gamma_open_loop_level_reports_its_send_lateness_too(server):
    (finished,) = bench(
        server, trace(TraceRequest(0.0, 3, 2)), ({"concurrency": 1},), steady_multiple=None
    )
    assert validated(finished.result).send_lateness is None
    from agents.loadgen import RandomPrompts

    (rated,) = bench(server, RandomPrompts(4, 2), ({"request_rate": 200.0},), num_prompts=20)
    assert validated(rated.result).send_lateness.max_ms >= 0


def test_the_simulator_replays_the_same_schedule_and_caches_what_hash_ids_share():
    # Three prompts of 2 × 512 tokens + a tail; hash ids cover full blocks only, so the
    # prefix cache's 16-token blocks line up with them and the hits are exact.
    requests = (
        TraceRequest(0.0, 1100, 8, (1, 2)),
        TraceRequest(2.0, 1100, 8, (1, 3)),
        TraceRequest(4.0, 1100, 8, (1, 2)),
        TraceRequest(6.0, 1100, 8, (4, 2)),
    )
    config = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=TracePrompts(Trace("mooncake", requests, 512)),
        levels=({"request_rate": 1.0},),
        metrics_url=None,
    )
    scheduler = make_scheduler(MODEL_PRESETS["llama-3.1-8b"].facts, gpu_profile("H100"), {})
    (level,) = OfflineBench(config, scheduler).run().levels
    assert level["completed"] == 4
    assert level["replay"] == {"requests": 4, "trace_rate": 0.5, "time_scale": 0.5}
    assert level["send_lateness"] == {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    server = level["server"]
    # Request 2 reuses block 1, request 3 blocks 1 and 2; block 2 after block 4 is another
    # chain (its prefix differs), so request 4 reuses nothing.
    assert server["prefix_cache_hits"] == 512 + 1024
    assert server["prefix_cache_queries"] == 4 * 1100


def test_a_workload_names_a_trace_file_and_its_window(tmp_path):
    path = tmp_path / "azure.csv"
    path.write_bytes((EXAMPLES / "azure.csv").read_bytes())
    workload = Workload.model_validate(
        {
            "dataset": {
                "kind": "azure",
                "dataset_id": str(uuid.uuid4()),
                "start_seconds": 5,
                "duration_seconds": 10,
            },
            "request_rates": [4],
        }
    )
    config = config_from_workload(workload, base_url="http://x", model="m", dataset_path=path)
    whole = trace_prompts(path, "azure")
    inside = [r for r in whole.trace.requests if 5 <= r.offset < 15]
    assert len(config.source) == len(inside) > 0
    assert config.source.trace.requests[0].offset == 0
    with pytest.raises(ValueError, match="needs its local file path"):
        config_from_workload(workload, base_url="http://x", model="m")


@pytest.mark.slow
def test_bench_takes_a_trace_file_and_names_what_is_wrong(server, tmp_path, capsys):
    out = tmp_path / "out.json"
    code = main(
        ["bench", "--base-url", server.base_url, "--model", "fake?ttft_ms=1&itl_ms=1",
         "--dataset", f"burstgpt:{EXAMPLES / 'burstgpt.csv'}", "--trace-model", "GPT-4",
         "--request-rate", "20", "--json", str(out)]
    )  # fmt: skip  # flag, value
    assert code == 0
    (level,) = json.loads(out.read_text())["levels"]
    gpt4 = (EXAMPLES / "burstgpt.csv").read_text().count(",GPT-4,")
    assert 0 < level["completed"] <= gpt4 and level["replay"]["requests"] == level["completed"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n')
    assert main(["bench", "--base-url", server.base_url, "--model", "m",
                 "--dataset", f"mooncake:{bad}",
                 "--request-rate", "1"]) == 2  # fmt: skip  # flag, value
    assert "line 2: input_length: missing" in capsys.readouterr().err.replace("\n", " ")
    assert main(["bench", "--base-url", server.base_url, "--model", "m",
                 "--dataset", f"azure:{EXAMPLES / 'azure.csv'}", "--trace-model", "x",
                 "--request-rate", "1"]) == 2  # fmt: skip  # flag, value
    assert "--trace-model" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_replays_at_a_time_scale_of_the_traces_own_times(server, tmp_path, capsys):
    out = tmp_path / "out.json"
    code = main(
        ["bench", "--base-url", server.base_url, "--model", "fake?ttft_ms=1&itl_ms=1",
         "--dataset", f"mooncake:{EXAMPLES / 'mooncake.jsonl'}", "--output-len", "2",
         "--time-scale", "0.05,0.1", "--json", str(out)]
    )  # fmt: skip  # flag, value
    assert code == 0, capsys.readouterr().err
    levels = json.loads(out.read_text())["levels"]
    trace_rate = trace_prompts(EXAMPLES / "mooncake.jsonl", "mooncake").trace.mean_rate
    # Each factor is a level at the trace's rate / S, replaying its times × S.
    assert [level["request_rate"] for level in levels] == pytest.approx(
        [trace_rate / 0.05, trace_rate / 0.1]
    )
    assert [level["replay"]["time_scale"] for level in levels] == pytest.approx([0.05, 0.1])
    for level, scale in zip(levels, (0.05, 0.1), strict=True):
        assert level["replay"]["requests"] == level["completed"] == 24
        # The last request goes out at the trace's span × S, not before.
        assert level["duration"] >= 9.875 * scale
    for argv, problem in (
        (["--dataset", "random", "--time-scale", "1"], "only a trace"),
        (["--dataset", f"azure:{EXAMPLES / 'azure.csv'}", "--time-scale", "0"], "above 0"),
        (["--dataset", f"azure:{EXAMPLES / 'azure.csv'}", "--time-scale", "fast"], "'fast'"),
    ):
        assert main(["bench", "--base-url", server.base_url, "--model", "m", *argv]) == 2
        err = capsys.readouterr().err.replace("\n", " ")
        assert "--time-scale: " in err and problem in err
