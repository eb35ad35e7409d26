"""The simulator behaves like vLLM where it matters for choosing a config.

These tests check directions and shapes (saturation, queueing, preemption, chunking trade-off,
tensor parallelism), not the simulator's own formulas; everything runs offline in simulated
time, so each test takes milliseconds.
"""

from __future__ import annotations

import statistics

import pytest

from agents.engines.sim import SimRequest, closed_loop
from agents.engines.sim.frontend import DEFAULT_FRONT_END, FrontEnd
from agents.engines.sim.scheduler import (
    BlockPool,
    Scheduler,
    make_scheduler,
    prompt_block_hashes,
    simulate,
)
from agents.hardware import (
    MODEL_PRESETS,
    Efficiency,
    ModelFacts,
    StartRefusal,
    StepModel,
    gpu_profile,
    load_model_facts,
    start_check,
)

LLAMA8 = MODEL_PRESETS["llama-3.1-8b"].facts
LLAMA70 = MODEL_PRESETS["llama-3.1-70b"].facts
H100 = gpu_profile("H100")
HAND_OFF = Efficiency().request_overhead_s  # the fixed hand-off, not serial


def run(concurrency, *, flags=None, prompt=512, output=128, total=None, model=LLAMA8, gpu=H100):
    scheduler = make_scheduler(model, gpu, {"max_model_len": 8192, **(flags or {})})
    result = closed_loop(
        scheduler,
        concurrency=concurrency,
        total=total or max(3 * concurrency, 12),
        make=lambda i: SimRequest(i, prompt, output),
    )
    return scheduler, result


def p(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_it_raises_throughput_with_concurrency_then_saturates():
    throughput = {c: run(c)[1].output_throughput for c in (1, 8, 64, 256, 512)}
    assert throughput[1] < throughput[8] < throughput[64] < throughput[256]
    # Doubling concurrency at the top gains far less than it did at the bottom.
    assert throughput[512] / throughput[256] < 1.15
    assert throughput[8] / throughput[1] > 4


def test_it_grows_inter_token_latency_with_the_batch():
    itl = {c: statistics.median(run(c, prompt=64)[1].itls()) for c in (1, 32, 256)}
    assert itl[1] < itl[32] < itl[256]


def test_a_tiny_kv_cache_makes_requests_wait_and_be_preempted():
    roomy, roomy_result = run(64, prompt=1024, output=512)
    tight, tight_result = run(64, prompt=1024, output=512, flags={"gpu_memory_utilization": 0.26})
    assert tight.pool.num_blocks < roomy.pool.num_blocks / 10
    assert roomy_result.preemptions == 0
    assert tight_result.preemptions > 0
    assert tight_result.max_waiting > 0
    assert tight_result.max_running < 64
    assert tight_result.output_throughput < roomy_result.output_throughput
    assert len(tight_result.requests) == len(roomy_result.requests)  # all still served


def test_max_num_seqs_caps_the_batch_and_the_rest_wait():
    scheduler, result = run(32, flags={"max_num_seqs": 4})
    assert result.max_running == 4
    assert result.max_waiting == 28
    assert scheduler.preemptions == 0


def test_a_bigger_token_budget_trades_ttft_for_itl_under_long_prompts():
    def level(budget):
        _, result = run(
            32,
            prompt=6000,
            output=256,
            total=96,
            # vLLM refuses a budget below max_num_seqs (1,024 by default on an H100).
            flags={"max_num_batched_tokens": budget, "max_num_seqs": 64},
        )
        return statistics.median(result.ttfts()), p(result.itls(), 0.99)

    small_ttft, small_itl_p99 = level(512)
    big_ttft, big_itl_p99 = level(8192)
    # Long prompts are prefilled in fewer, larger chunks: first tokens come sooner…
    assert big_ttft < small_ttft
    # …but decodes that share a step with a large chunk wait longer for their next token.
    assert big_itl_p99 > 2 * small_itl_p99


def test_chunked_prefill_off_refuses_a_budget_below_max_model_len():
    with pytest.raises(StartRefusal, match="max_num_batched_tokens"):
        make_scheduler(
            LLAMA8,
            H100,
            {
                "max_model_len": 8192,
                "enable_chunked_prefill": False,
                "max_num_batched_tokens": 2048,
            },
        )


def test_tensor_parallelism_lowers_decode_step_time():
    def decode_itl(tp):
        _, result = run(16, prompt=128, output=256, flags={"tensor_parallel_size": tp})
        return statistics.median(result.itls())

    # Splitting an 8B model's weights halves their reads, but the step's fixed costs, the
    # per-layer floor and the all-reduces do not shrink: with the constants fitted to the
    # published rows (docs/simulator.md) a small model gains only a few per cent.
    assert decode_itl(2) < decode_itl(1)
    assert decode_itl(4) < decode_itl(2)


def test_tensor_parallelism_lets_a_model_that_does_not_fit_start():
    with pytest.raises(StartRefusal, match="CUDA out of memory"):
        make_scheduler(LLAMA70, H100, {"max_model_len": 8192})
    scheduler = make_scheduler(LLAMA70, H100, {"max_model_len": 8192, "tensor_parallel_size": 4})
    assert scheduler.pool.num_blocks > 0


def test_it_refuses_a_max_model_len_beyond_the_kv_cache_like_vllm():
    with pytest.raises(StartRefusal) as caught:
        make_scheduler(LLAMA8, gpu_profile("RTX 4090"), {"gpu_memory_utilization": 0.9})
    message = str(caught.value)
    # vLLM 0.11's words, its "models's" included (v1/core/kv_cache_utils.py).
    assert "To serve at least one request with the models's max seq len (131072)" in message
    assert "estimated maximum model length is" in message


def test_it_refuses_a_context_beyond_the_model_and_heads_not_divisible():
    with pytest.raises(StartRefusal, match="User-specified max_model_len"):
        make_scheduler(LLAMA8, H100, {"max_model_len": 200_000})
    odd = ModelFacts("odd", 1e9, 8, 1536, 12, 4, 128, max_position_embeddings=4096)
    with pytest.raises(StartRefusal, match="divisible by tensor parallel size"):
        make_scheduler(odd, H100, {"tensor_parallel_size": 8})


def test_prefix_caching_hits_shared_prefixes_and_cuts_ttft():
    shared = [f"s{i}" for i in range(2048)]

    def level(caching):
        scheduler = make_scheduler(
            LLAMA8, H100, {"max_model_len": 8192, "enable_prefix_caching": caching}
        )
        requests = []
        for i in range(24):
            words = shared + [f"u{i}-{j}" for j in range(64)]
            hashes = prompt_block_hashes(words, 16) if caching else ()
            requests.append(SimRequest(i, len(words), 32, arrival=i * 0.5, block_hashes=hashes))
        return scheduler, simulate(scheduler, requests)

    _, with_cache = level(True)
    _, without = level(False)
    assert with_cache.prefix_hits >= 23 * 2048 * 0.99
    assert with_cache.prefix_hits <= with_cache.prefix_queries
    assert without.prefix_hits == 0
    assert statistics.median(with_cache.ttfts()) < 0.5 * statistics.median(without.ttfts())


def scheduler_with_front_end(seconds):
    settings, plan = start_check(LLAMA8, H100, {"max_model_len": 8192})
    step_model = StepModel(LLAMA8, H100, settings, plan, Efficiency(request_overhead_s=seconds))
    # No serial API-server cost: these tests hold the fixed hand-off alone.
    return Scheduler(settings, step_model, front_end=FrontEnd(0.0, 0.0, 0.0))


def test_a_request_reaches_the_engine_only_after_the_servers_front_end():
    def first_token(seconds):
        request = SimRequest(0, 512, 4, arrival=1.0)
        simulate(scheduler_with_front_end(seconds), [request])
        return request

    without, with_front_end = first_token(0.0), first_token(0.01)
    assert without.scheduled_at == 1.0
    assert with_front_end.ready_at == with_front_end.scheduled_at == pytest.approx(1.01)
    # The same prefill step, 10 ms later: TTFT grows by the front end's time exactly.
    ttft_without = without.token_times[0] - without.arrival
    ttft_with = with_front_end.token_times[0] - with_front_end.arrival
    assert ttft_with - ttft_without == pytest.approx(0.01)


def test_the_engine_does_not_wait_for_a_request_still_in_the_front_end():
    scheduler = scheduler_with_front_end(0.01)
    # Outputs of different lengths: requests finish one by one while others decode.
    result = closed_loop(
        scheduler, concurrency=8, total=40, make=lambda i: SimRequest(i, 256, 32 + 7 * i % 64)
    )
    follow_ups = result.requests[8:]
    for request in follow_ups:
        # Sent when another finished, at a step's end: the engine went on with the next step
        # without it, so it was first scheduled after its front-end time, never before.
        assert request.scheduled_at >= request.ready_at == pytest.approx(request.arrival + 0.01)
    # The step under way when it became ready ran without it: it waited for that step's end.
    assert statistics.median(r.scheduled_at - r.ready_at for r in follow_ups) > 0
    # Requests still in the front end are not counted as waiting in the engine.
    waiting = scheduler_with_front_end(0.01)
    waiting.add(SimRequest(0, 16, 1, arrival=0.0))
    assert waiting.waiting_at(0.005) == 0 and waiting.waiting_at(0.01) == 1
    assert waiting.schedule(0.005) is None and waiting.ready_later(0.005) == 0.01
    assert waiting.schedule(0.01) is not None


def test_it_is_deterministic():
    first = run(48, prompt=700, output=100)[1]
    second = run(48, prompt=700, output=100)[1]
    assert [r.token_times for r in first.requests] == [r.token_times for r in second.requests]


def test_model_specs_load_from_the_sites_field_names(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(
        '{"name": "m", "num_parameters": 7e9, "num_hidden_layers": 32, "hidden_size": 4096,'
        ' "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16",'
        ' "max_position_embeddings": 8192}'
    )
    spec = load_model_facts(str(path))
    assert (spec.num_kv_heads, spec.head_dim, spec.max_position_embeddings) == (8, 128, 8192)
    with pytest.raises(ValueError, match="neither a preset"):
        load_model_facts(str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="unknown GPU"):
        gpu_profile("TPU")


def test_one_api_server_caps_the_request_rate_of_many_tiny_requests():
    # 1,000 requests of 128 tokens in and 4 out sent at once: the engine alone would finish
    # them far faster than one API-server process can take them in and stream them out.
    costs = FrontEnd(request_s=0.005, prompt_token_s=2e-6, output_token_s=25e-6)
    cap = 1 / (costs.request_s + 128 * costs.prompt_token_s + 4 * costs.output_token_s)

    def requests_per_second(front_end):
        settings, plan = start_check(LLAMA8, H100, {"max_model_len": 4096})
        scheduler = Scheduler(
            settings, StepModel(LLAMA8, H100, settings, plan), front_end=front_end
        )
        result = simulate(scheduler, [SimRequest(i, 128, 4) for i in range(1000)])
        return len(result.requests) / result.duration

    assert requests_per_second(costs) == pytest.approx(cap, rel=0.03)
    # The engine alone (its 2.2 ms step and 39 us per running request) goes well past it.
    assert requests_per_second(FrontEnd(0.0, 0.0, 0.0)) > 1.3 * cap


def test_tokens_reach_the_client_after_the_front_end_streams_them():
    def token_times(output_token_s):
        settings, plan = start_check(LLAMA8, H100, {"max_model_len": 4096})
        front_end = FrontEnd(0.0, 0.0, output_token_s)
        scheduler = Scheduler(
            settings, StepModel(LLAMA8, H100, settings, plan), front_end=front_end
        )
        result = simulate(scheduler, [SimRequest(i, 64, 16) for i in range(64)])
        return [t for request in result.requests for t in request.token_times]

    # The same engine steps; each step's 64 tokens reach their clients once the one process
    # has streamed all of them (64 x 25 us), well within the next step.
    shifts = [b - a for a, b in zip(token_times(0.0), token_times(25e-6), strict=True)]
    assert shifts == pytest.approx([64 * 25e-6] * len(shifts))


def test_the_front_end_tokenizes_the_prompt_before_the_engine_sees_it():
    def ready_at(prompt_len):
        request = SimRequest(0, prompt_len, 2)
        simulate(make_scheduler(LLAMA8, H100, {"max_model_len": 8192}), [request])
        return request.ready_at

    assert ready_at(4000) - ready_at(100) == pytest.approx(3900 * DEFAULT_FRONT_END.prompt_token_s)


def test_a_chat_request_costs_the_one_api_server_more_than_a_completions_request():
    # 1,000 requests of 128 in and 4 out at once, as GPUStack sent them to the chat endpoint:
    # the default front end takes chat requests in at CHAT_REQUEST_S each, one after another.
    def run_of(chat):
        scheduler = make_scheduler(LLAMA8, H100, {"max_model_len": 4096})
        requests = [SimRequest(i, 128, 4, chat=chat) for i in range(1000)]
        return simulate(scheduler, requests)

    chat, completions = run_of(True), run_of(False)
    cost = DEFAULT_FRONT_END.chat_request_s
    assert cost > 0
    assert len(chat.requests) / chat.duration == pytest.approx(1 / cost, rel=0.03)
    # The engine alone, as a completions request sees it (no serial cost by default).
    assert len(completions.requests) / completions.duration > 2 / cost
    # The n-th chat request reaches the engine n x the cost after they were sent.
    assert [r.ready_at for r in chat.requests[:3]] == pytest.approx(
        [(n + 1) * cost + HAND_OFF for n in range(3)]
    )


def test_a_released_requests_tail_blocks_are_evicted_before_its_prefix():
    # vLLM frees a request's blocks tail first, so a preempted request finds its prefix.
    pool = BlockPool(4)
    assert pool.take(4)
    request = SimRequest(0, 64, 1, block_hashes=(1, 2, 3, 4))
    for block_hash in request.block_hashes:
        pool.refs[block_hash] = 1
    request.cached = list(request.block_hashes)
    pool.release(request)
    assert pool.take(2)  # evicts two cached blocks: the last two of the prompt
    assert [pool.is_cached(h) for h in (1, 2, 3, 4)] == [True, True, False, False]


def test_serve_sim_writes_a_clients_tokens_in_the_order_they_were_made():
    """Tokens the API server's queue releases at one moment (a backlogged front end) leave
    in order, the last one last: timers due together run in no set order, and a token
    written after the stream's end is lost to the client."""
    import asyncio
    import random

    from agents.engines.sim.command import argument_parser, build
    from agents.engines.sim.completions import WORDS, Client

    server = build(argument_parser().parse_args(["llama-3.1-8b", "--gpu", "H100"]))
    written: list[tuple[int, bool]] = []

    class Connection:
        closed = False

        def on_token(self, client, request, words, done):
            written.extend((word, done) for word in words)

    async def emit_twelve_due_together():
        loop = asyncio.get_running_loop()
        server.t0 = loop.time()
        client = Client(Connection(), 0, server.name, True, True, False, random.Random(7))
        server.clients[0] = client
        request = SimRequest(0, 10, 12)
        for index in range(12):
            request.output = index + 1
            request.token_times.append(0.05)  # every token released 50 ms from now
            server._emit(request, 1, done=index == 11)
        await asyncio.sleep(0.2)

    asyncio.run(emit_twelve_due_together())
    made = random.Random(7)
    assert [word for word, _ in written] == [made.randrange(len(WORDS)) for _ in range(12)]
    assert [done for _, done in written] == [False] * 11 + [True]
