"""Speculative decoding in the simulator (issue 34): each decode step verifies k + 1 tokens
and keeps (1 - a^(k+1)) / (1 - a) on average. Offline, in simulated time."""

from __future__ import annotations

import pytest

from agents.engines.sim import SimRequest, closed_loop
from agents.engines.sim.scheduler import make_scheduler
from agents.hardware import MODEL_PRESETS, StartRefusal, gpu_profile, start_check
from agents.hardware.speculative import MTP_ACCEPTANCE_RATE

H100 = gpu_profile("H100")
LLAMA_8B = MODEL_PRESETS["llama-3.1-8b"].facts
FLAGS = {"max_model_len": 4096}
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.7}


def run(flags):
    scheduler = make_scheduler(LLAMA_8B, H100, {**FLAGS, **flags})
    result = closed_loop(scheduler, concurrency=4, total=8, make=lambda i: SimRequest(i, 200, 401))
    return scheduler, result


def test_a_decode_step_keeps_the_expected_accepted_tokens_and_the_rest_is_dropped():
    plain, alone = run({})
    spec, drafted = run({"speculative_config": NGRAM})
    expected = (1 - 0.7**4) / (1 - 0.7)  # 2.533 tokens per decode step
    assert spec.generation_tokens == plain.generation_tokens == 8 * 401
    # Each request's 400 tokens after the first, over its decode steps (one chunk each).
    steps = [len(r.token_times) - 1 for r in drafted.requests]
    assert 400 / max(steps) == pytest.approx(expected, rel=0.01)
    assert spec.spec_accepted_tokens / spec.spec_draft_tokens == pytest.approx(
        (expected - 1) / 3, rel=0.01
    )
    # Verifying 4 tokens costs little more than 1 at this batch: TPOT falls.
    tpot = lambda result: result.duration / len(result.itls())  # noqa: E731
    assert drafted.duration < alone.duration / 2
    assert tpot(drafted) > tpot(alone)  # per chunk: a chunk carries 2.5 tokens


def test_eagle_pays_for_its_draft_passes_and_ngram_does_not():
    eagle = {**NGRAM, "method": "eagle", "model": "org/draft", "revision": "main"}
    _, ngram = run({"speculative_config": NGRAM})
    _, drafted = run({"speculative_config": eagle})
    assert drafted.duration > ngram.duration
    assert [len(r.token_times) for r in drafted.requests] == [
        len(r.token_times) for r in ngram.requests
    ]


def test_mtp_has_deepseeks_published_rate_and_the_others_need_one_named():
    settings, _ = start_check(
        LLAMA_8B,
        H100,
        {**FLAGS, "speculative_config": {"method": "mtp", "num_speculative_tokens": 1}},
    )
    assert settings.speculative.acceptance_rate == MTP_ACCEPTANCE_RATE == 0.85
    bare = {"method": "ngram", "num_speculative_tokens": 3}
    with pytest.raises(StartRefusal, match=r"speculative_config\.acceptance_rate: the simulator"):
        start_check(LLAMA_8B, H100, {**FLAGS, "speculative_config": bare})
    draft = {"method": "draft_model", "num_speculative_tokens": 3, "acceptance_rate": 0.5}
    with pytest.raises(StartRefusal, match=r"speculative_config\.method: the simulator does not"):
        start_check(LLAMA_8B, H100, {**FLAGS, "speculative_config": draft})


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_serve_sim_streams_each_kept_token_as_a_word(chat):
    """A speculative step's tokens leave in one chunk, one word per token: the text a client
    reads holds as many words as ``completion_tokens`` says, as vLLM's would."""
    import asyncio
    import json

    from agents.engines.sim.command import argument_parser, build
    from agents.engines.sim.http import Connection

    args = argument_parser().parse_args(
        [
            "llama-3.1-8b",
            "--gpu",
            "H100",
            "--max-model-len",
            "4096",
            "--speed",
            "50",
            "--speculative-config",
            json.dumps(NGRAM),
        ]
    )
    server = build(args)
    path = "/v1/chat/completions" if chat else "/v1/completions"
    body = {
        "model": server.name,
        "max_tokens": 40,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body |= {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": "hi"}

    async def stream() -> bytes:
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: Connection(server), "127.0.0.1", 0)
        engine = asyncio.create_task(server.run_engine())
        port = listener.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        payload = json.dumps(body).encode()
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
            + payload
        )
        received = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        engine.cancel()
        listener.close()
        return received

    received = asyncio.run(stream())
    events = [line[6:] for line in received.split(b"\n") if line.startswith(b"data: {")]
    messages = [json.loads(event) for event in events]
    texts = [
        (m["choices"][0]["delta"].get("content") if chat else m["choices"][0]["text"])
        for m in messages
        if m["choices"]
    ]
    texts = [text for text in texts if text]  # a chat stream's first chunk: the role alone
    usage = messages[-1]["usage"]["completion_tokens"]
    words = [len(text.split()) for text in texts]
    assert usage == 40 and sum(words) == 40
    assert max(words) > 1  # some step kept several tokens, streamed in one chunk
    assert len(texts) < 40
