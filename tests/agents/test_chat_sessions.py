"""Multi-turn chat sessions (issue 19): each turn sends the whole history with the model's
replies as it streamed them, checked message by message by the fake server; closed-loop
levels keep N sessions open, open-loop levels start sessions at a rate; figures by turn."""

from __future__ import annotations

import json
import random
from collections import Counter
from itertools import pairwise

import pytest

from agents.cli import main
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, gpu_profile
from agents.loadgen import BenchConfig, SessionPrompts
from agents.loadgen.workload import prompt_source
from agents.predict import OfflineBench
from agents.protocol import LevelResult, Workload
from tests.agents.fake_openai_server import FakeServer
from tests.agents.test_loadgen_steady import bench as steady_bench
from tests.agents.test_predict import in_simulated_time, live_on_the_simulator

REPLY = " t{}"  # the fake server's token i


def validated(result: dict | LevelResult) -> LevelResult:
    if isinstance(result, LevelResult):
        return result  # the load generator's own
    return LevelResult.model_validate({k: v for k, v in result.items() if k != "server"})


@pytest.fixture(scope="module")
def server():
    with FakeServer() as running:
        yield running


def bench(server, source, levels, **overrides):
    settings = {
        "model": "fake?ttft_ms=2&itl_ms=1&keep=messages",
        "endpoint": "chat",
        "num_prompts": 12,
        "seed": 3,
        "slos": None,
        "steady_multiple": None,
    }
    return steady_bench(server, source=source, levels=levels, **(settings | overrides))


def sessions_source(**fields) -> SessionPrompts:
    defaults = {"min_turns": 2, "max_turns": 4, "system_len": 6, "user_len": 5, "output_len": 3}
    return SessionPrompts(**(defaults | fields))


def test_sessions_are_seeded_and_share_one_system_prompt_per_draw():
    source = sessions_source(think_seconds=2.0, range_ratio=0.5)
    plans = source.sessions(20, random.Random(1))
    assert plans == source.sessions(20, random.Random(1))
    assert len({plan.system for plan in plans}) == 1
    assert plans[0].system != source.sessions(1, random.Random(2))[0].system
    assert {len(plan.turns) for plan in plans} <= {2, 3, 4}
    assert all(plan.turns[0].think == 0 for plan in plans)
    thinks = [turn.think for plan in plans for turn in plan.turns[1:]]
    assert all(think > 0 for think in thinks) and 0.5 < sum(thinks) / len(thinks) < 6
    lengths = [turn.message_len for plan in plans for turn in plan.turns]
    assert min(lengths) >= 2 and max(lengths) <= 7 and len(set(lengths)) > 1


def test_every_turn_sends_the_whole_history_with_the_replies_as_streamed(server):
    (finished,) = bench(server, sessions_source(), ({"concurrency": 2},))
    truth = server.truth()
    by_session: dict[int, list] = {}
    for record in finished.records:
        assert record.success
        by_session.setdefault(record.session, []).append(record)
    assert len(finished.records) == 12 and len(by_session) >= 3
    for records in by_session.values():
        assert [r.turn for r in records] == list(range(1, len(records) + 1))
        previous: list[dict] | None = None
        for record in records:
            messages = truth[record.response_id]["messages"]
            assert messages[0]["role"] == "system" and len(messages[0]["content"].split()) == 6
            assert messages[-1]["role"] == "user"
            assert len(messages) == 2 * record.turn  # system + (user, assistant) × earlier + user
            if previous is not None:
                reply = "".join(REPLY.format(i) for i in range(3))
                assert messages[: len(previous)] == previous
                assert messages[len(previous)] == {"role": "assistant", "content": reply}
            previous = messages
            # The prompt grows with the history: the server counted every word of it.
            assert record.prompt_tokens == sum(len(m["content"].split()) for m in messages)


def test_closed_loop_keeps_n_sessions_open_and_counts_turns(server):
    (finished,) = bench(server, sessions_source(min_turns=3, max_turns=3), ({"concurrency": 3},))
    records = finished.records
    assert len(records) == 12
    # Three slots: sessions 0-2 start together, each slot's next session follows its last.
    assert sorted(r.session for r in records if r.turn == 1)[:3] == [0, 1, 2]
    # Never more than three sessions open at once: a slot's next session starts only after
    # its last turn finished (which slot frees first is the server's timing, not fixed).
    spans = {}
    for r in records:
        first, last = spans.get(r.session, (r.start, r.finished))
        spans[r.session] = (min(first, r.start), max(last, r.finished))
    for start, _ in spans.values():
        assert sum(1 for s, f in spans.values() if s <= start < f) <= 3
    assert 3 < len(spans) <= 6
    # The 12-turn count cuts the next sessions short; the figures count what was sent.
    turns = validated(finished.result).turns
    by_turn = Counter(r.turn for r in records)
    assert [(t.turn, t.requests) for t in turns] == sorted(by_turn.items())
    assert by_turn[1] == len(spans)
    for session in spans:
        ordered = sorted((r for r in records if r.session == session), key=lambda r: r.turn)
        assert [r.turn for r in ordered] == list(range(1, len(ordered) + 1))
        assert all(a.finished <= b.start for a, b in pairwise(ordered))
    assert turns[0].mean_prompt_tokens < turns[1].mean_prompt_tokens < turns[2].mean_prompt_tokens
    assert all(t.completed == t.requests and t.median_ttft_ms > 0 for t in turns)


def test_a_steady_session_level_opens_its_window_after_every_first_session(server):
    source = sessions_source(min_turns=2, max_turns=2)
    (finished,) = bench(server, source, ({"concurrency": 2},), steady_multiple=1.0, num_prompts=6)
    result = validated(finished.result)
    first_sessions_end = max(
        r.finished for r in finished.records if r.session in (0, 1) and r.turn == 2
    )
    window_start = finished.records[0].start + result.window.start_s
    assert window_start >= first_sessions_end - 0.05
    assert result.window.requests >= 6


def test_open_loop_starts_sessions_at_a_rate_and_runs_them_whole(server):
    source = sessions_source(min_turns=2, max_turns=2, think_seconds=0.01)
    (finished,) = bench(server, source, ({"request_rate": 40.0},), num_prompts=10)
    records = finished.records
    sessions = {r.session for r in records}
    # Sessions enough for 10 turns, each run to its end: 5 sessions of 2 turns.
    assert len(sessions) == 5 and len(records) == 10
    assert all(r.scheduled is not None for r in records if r.turn == 1)
    assert all(r.scheduled is None for r in records if r.turn == 2)
    result = validated(finished.result)
    assert result.window is None and result.send_lateness.max_ms >= 0
    assert [t.requests for t in result.turns] == [5, 5]


def test_a_failed_turn_ends_its_session(server):
    (finished,) = bench(
        server,
        sessions_source(min_turns=3, max_turns=3),
        ({"concurrency": 1},),
        model="fake?mode=http500",
        num_prompts=2,
    )
    assert [(r.session, r.turn, r.success) for r in finished.records] == [
        (0, 1, False),
        (1, 1, False),
    ]


def test_a_workload_of_chat_sessions_needs_the_chat_endpoint():
    dataset = {"kind": "chat_sessions", "user_len": 10, "output_len": 5, "max_turns": 3}
    workload = Workload.model_validate({"dataset": dataset, "endpoint": "chat", "concurrency": [4]})
    source = prompt_source(workload)
    assert isinstance(source, SessionPrompts) and source.max_turns == 3
    assert workload.dataset.longest_context() == 3 * 15
    with pytest.raises(ValueError, match="chat endpoint"):
        Workload.model_validate({"dataset": dataset, "concurrency": [4]})


def test_bench_runs_chat_sessions_and_names_a_bad_option(server, tmp_path, capsys):
    out = tmp_path / "out.json"
    arguments = ["bench", "--base-url", server.base_url, "--model", "fake?ttft_ms=1&itl_ms=1",
                 "--dataset", "chat_sessions", "--endpoint", "chat", "--turns", "2-3",
                 "--system-len", "4", "--input-len", "5", "--output-len", "2",
                 "--concurrency", "2", "--num-prompts", "10"]  # fmt: skip  # flag, value
    assert main([*arguments, "--json", str(out)]) == 0
    (level,) = json.loads(out.read_text())["levels"]
    assert level["completed"] == 10 and level["turns"][0]["turn"] == 1
    assert main([*arguments[:-2], "--turns", "3-2"]) == 2
    assert "--turns: must be at least min_turns (3)" in capsys.readouterr().err
    assert main([*arguments[:7], "--concurrency", "1"]) == 2  # no --endpoint chat
    assert "add --endpoint chat" in capsys.readouterr().err


def offline_sessions(source: SessionPrompts, levels, **fields):
    config = BenchConfig(
        base_url="simulator://offline",
        model="m",
        source=source,
        levels=levels,
        endpoint="chat",
        metrics_url=None,
        **({"num_prompts": 40} | fields),
    )
    scheduler = make_scheduler(MODEL_PRESETS["llama-3.1-8b"].facts, gpu_profile("H100"), {})
    return OfflineBench(config, scheduler).run().levels


def test_the_simulator_offline_runs_sessions_and_caches_their_history():
    source = sessions_source(min_turns=4, max_turns=4, system_len=300, user_len=50, output_len=20)
    (level,) = offline_sessions(source, ({"concurrency": 2},))
    assert level["completed"] == 40
    turns = level["turns"]
    assert [t["requests"] for t in turns] == [10, 10, 10, 10]
    # Turn k's prompt: a role marker and 300 words of system prompt, k user messages of 51
    # tokens (marker and words) and k - 1 replies of 21 (marker and the 20 tokens).
    assert [t["mean_prompt_tokens"] for t in turns] == [
        301 + 51 * k + 21 * (k - 1) for k in (1, 2, 3, 4)
    ]
    server = level["server"]
    # Everything but the newest message can come from the cache; the first turn of each of
    # the 10 sessions shares only the system prompt (from the second session on).
    assert 0.5 < server["prefix_cache_hit_rate"] < 1
    cached_history = sum(
        16 * ((t["mean_prompt_tokens"] - 51) // 16) * t["requests"] for t in turns[1:]
    )
    assert server["prefix_cache_hits"] >= cached_history
    # Later turns carry more history but most of it is cached: TTFT grows far less than
    # the prompt does.
    assert turns[3]["median_ttft_ms"] < 2 * turns[0]["median_ttft_ms"]


def test_the_simulator_offline_starts_sessions_at_a_rate_with_think_time():
    source = sessions_source(min_turns=2, max_turns=2, think_seconds=0.5)
    (level,) = offline_sessions(source, ({"request_rate": 4.0},), num_prompts=20)
    assert level["completed"] == 20 and [t["requests"] for t in level["turns"]] == [10, 10]
    assert level["send_lateness"]["max_ms"] == 0.0
    # Ten sessions at 4/s with a think time of 0.5 s on average before their second turn.
    assert 2.0 < level["duration"] < 6.0


@pytest.mark.slow
def test_offline_and_live_sessions_on_the_simulator_agree(tmp_path):
    source = sessions_source(min_turns=3, max_turns=3, system_len=200, user_len=40, output_len=16)
    config = BenchConfig(
        base_url="http://replaced",
        model="m",
        source=source,
        levels=({"concurrency": 4},),
        endpoint="chat",
        num_prompts=36,
        metrics_url="auto",
    )
    (live,) = live_on_the_simulator(config, tmp_path)
    (predicted,) = offline_sessions(source, ({"concurrency": 4},), num_prompts=36)
    assert predicted["completed"] == live["completed"] == 36
    assert [t["mean_prompt_tokens"] for t in predicted["turns"]] == [
        t["mean_prompt_tokens"] for t in live["turns"]
    ]
    assert predicted["server"]["prefix_cache_hits"] == pytest.approx(
        live["server"]["prefix_cache_hits"], rel=0.1
    )
    for key in ("median_tpot_ms", "output_throughput"):
        assert predicted[key] == pytest.approx(in_simulated_time(live, key), rel=0.15), key
