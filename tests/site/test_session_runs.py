"""Session workloads end to end (issue 19): the real agent runner serves a chat-session and a
synthesized agentic workload on the simulator and streams them into the site; each level
is stored with its figures by turn and the server's prefix-cache counters exactly as the
agent computed them, and the run page shows the turns beside the hit rate."""

from __future__ import annotations

import pytest

from runs.models import Measurement

from .conftest import signed_in
from .test_agent_runs import Site, assert_site_holds_the_journal, new_sim_run, run_agent
from .test_web_runs import text_of

pytestmark = pytest.mark.django_db(transaction=True)

CHAT = {
    "dataset": {
        "kind": "chat_sessions",
        "min_turns": 3,
        "max_turns": 3,
        "system_len": 256,
        "user_len": 32,
        "output_len": 16,
    },
    "endpoint": "chat",
    "concurrency": [2],
    "requests_per_level": 12,
}
AGENTIC = {
    "dataset": {
        "kind": "agentic",
        "min_turns": 3,
        "max_turns": 3,
        "system_len": 512,
        "task_len": 64,
        "output_len": 16,
        "tool_output_len": 64,
        "tool_seconds": 0,
        "subagent_probability": 0,
        "block_size": 16,
    },
    "concurrency": [2],
    "requests_per_level": 12,
}


@pytest.mark.parametrize("workload", [CHAT, AGENTIC], ids=["chat", "agentic"])
def test_a_session_run_streams_its_turns_and_prefix_cache_hits_into_the_site(
    alice, tmp_path, workload
):
    run, token = new_sim_run(alice.org, workload=workload, serve_grid={"max_num_seqs": [8]})
    result, journal = run_agent(run, token, tmp_path, Site(run.id, token))
    assert result.exit_code == 0 and result.delivery.pending == 0
    assert_site_holds_the_journal(run, journal)
    (level,) = Measurement.objects.filter(trial__run=run)
    turns = level.result["turns"]
    assert [turn["turn"] for turn in turns] == [1, 2, 3]
    assert sum(turn["requests"] for turn in turns) >= 12
    assert all(turn["completed"] == turn["requests"] for turn in turns)
    # Each turn carries the whole context so far: its prompts grow turn by turn.
    prompts = [turn["mean_prompt_tokens"] for turn in turns]
    assert prompts == sorted(prompts) and prompts[0] < prompts[-1]
    # The shared system prompt and every earlier turn are in the server's prefix cache.
    hit_rate = level.server_metrics["prefix_cache_hit_rate"]
    assert 0.3 < hit_rate < 1
    text = text_of(signed_in(alice).get(f"/o/acme/runs/{run.id}/").content.decode())
    assert f"Server prefix-cache hits: {round(hit_rate * 100)} %" in text
    assert "By turn c=2" in text
    first = turns[0]
    assert f"1 {first['requests']} ({first['completed']}) {first['mean_prompt_tokens']:.0f}" in text
