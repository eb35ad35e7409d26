"""Long context (issue 19): the load generator sends prompts of 128k tokens and more with a
shared prefix, the simulator serves them at the model's full ``max_model_len``, the server
counts every token, and its prefix cache holds the shared part for every later request."""

from __future__ import annotations

import pytest

from agents.engines.sim.engine import sim_engine
from agents.loadgen import BenchConfig, PrefixPrompts, event_loop_runner, run_levels

pytestmark = pytest.mark.slow

CONTEXT = 131_072  # Llama 3.1's whole context
SHARED, SUFFIX, OUTPUT = 126_000, 1_000, 16
BLOCK = 16  # vLLM's default block size: the prefix cache holds whole blocks


def test_prompts_of_127k_tokens_are_sent_counted_and_their_shared_prefix_cached(tmp_path):
    engine = sim_engine(
        model_spec="llama-3.1-8b",
        gpu="H100",
        config={"max_model_len": CONTEXT},
        workdir=tmp_path,
        served_model_name="sim-8b",
        speed=50.0,
        startup_speed=1000.0,
        startup_timeout=60,
    )
    engine.start()
    try:
        config = BenchConfig(
            base_url=engine.base_url,
            model="sim-8b",
            source=PrefixPrompts(shared_len=SHARED, suffix_len=SUFFIX, output_len=OUTPUT),
            levels=({"concurrency": 1},),
            num_prompts=4,
            ignore_eos=True,
        )
        with event_loop_runner() as runner:
            (level,) = [level.as_json() for level in runner.run(run_levels(config))]
    finally:
        engine.stop()
    assert (level["completed"], level["failed"]) == (4, 0)
    assert level["total_input_tokens"] == 4 * (SHARED + SUFFIX)
    server = level["server"]
    assert server["prompt_tokens"] == 4 * (SHARED + SUFFIX)
    # One request at a time: each after the first finds the whole shared prefix (its full
    # blocks) in the cache, and nothing of its own suffix.
    shared_blocks = SHARED // BLOCK * BLOCK
    assert 3 * shared_blocks <= server["prefix_cache_hits"] < 3 * (SHARED + BLOCK)
