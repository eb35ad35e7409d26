"""A ground-truth OpenAI-compatible streaming server for load-generator tests and benchmarks.

Run it as its own process (``python -m tests.agents.fake_openai_server --port 0``; it prints
``PORT <n>`` once listening) so its timing does not share an interpreter with the client.

Guarantees:

- Streams ``/v1/completions`` and ``/v1/chat/completions`` like vLLM: chunked transfer
  encoding, one SSE event per chunk, content chunks, then a usage-only chunk (when
  ``stream_options.include_usage``), then ``data: [DONE]``. Keep-alive.
- The behaviour is chosen per request by the model name's query string:
  ``fake?ttft_ms=50&itl_ms=10`` and ``mode=`` one of ``ok`` (default), ``http500``,
  ``drop`` (the connection closes after ``drop_after`` tokens), ``no_usage``,
  ``malformed`` (a data line that is not JSON), ``stream_error`` (an error object in the
  stream); ``serve_len=N`` serves N tokens whatever ``max_tokens`` asked for; ``keep=messages``
  keeps each chat request's messages in its ground truth. Token ``i`` of a reply is the text
  `` t<i>``.
- Ground truth: for every response id, ``GET /truth`` returns when the request's last byte
  arrived (``t_recv``: on Linux the kernel's receive stamp, as the load generator reads
  its own, so the time the request waited in the socket for this server's busy event loop
  counts as the server's; elsewhere when the loop read it), when the loop read it
  (``t_read``), when each content chunk was handed to the socket (``writes``, stamped just
  before the write), and the token counts; ``POST /truth/reset`` clears it. The first token is
  due ``ttft_ms`` after ``t_recv``. Times are ``time.perf_counter``, the system-wide
  monotonic clock on Linux, comparable across processes.
- With ``--api-key KEY`` every ``/v1/`` request must carry ``Authorization: Bearer KEY``, or
  it is answered 401; ``GET /auth`` counts the requests it let in and those it refused.
- With ``--refuse-field NAME`` (repeatable) a completion request carrying that field is
  answered 400 as OpenAI's API answers an unknown one ("Unrecognized request argument
  supplied: NAME"), before any token.
- A request with ``"stream": false`` (an evaluation's) is answered whole, as vLLM answers one:
  the reply is the prompt's last word (a chat request's last message's), so a test knows
  which items a set of "Say X" prompts gets right.
- ``GET /metrics`` serves Prometheus text with vLLM's metric names: requests running, KV-cache
  usage (running / 256), counters for tokens, prefix-cache queries (every prompt token) and
  hits (half of them), and TTFT histogram sum/count.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from time import perf_counter
from urllib.parse import parse_qsl, urlsplit

from agents.loadgen.http import KERNEL_STAMPS
from agents.loadgen.stamped_socket import StampedSocket

KV_CAPACITY = 256


class State:
    def __init__(self) -> None:
        self.ids = itertools.count(1)
        self.truth: dict[str, dict] = {}
        self.running = 0
        self.counters = {
            "prompt_tokens": 0,
            "generation_tokens": 0,
            "prefix_cache_queries": 0,
            "prefix_cache_hits": 0,
            "num_preemptions": 0,
        }
        self.ttft_sum = 0.0
        self.ttft_count = 0
        self.api_key: str | None = None
        self.refused_fields: tuple[str, ...] = ()
        self.auth = {"accepted": 0, "refused": 0}

    def metrics(self) -> bytes:
        label = '{model_name="fake"}'
        lines = [
            "# HELP vllm:num_requests_running Requests running.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{label} {float(self.running)}",
            f"vllm:num_requests_waiting{label} 0.0",
            f"vllm:kv_cache_usage_perc{label} {self.running / KV_CAPACITY}",
            'vllm:cache_config_info{block_size="16",num_gpu_blocks="1024"} 1.0',
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f'vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="fake"}} '
            f"{self.ttft_count}",
            f"vllm:time_to_first_token_seconds_sum{label} {self.ttft_sum}",
            f"vllm:time_to_first_token_seconds_count{label} {float(self.ttft_count)}",
        ]
        lines += [f"vllm:{name}_total{label} {float(v)}" for name, v in self.counters.items()]
        return ("\n".join(lines) + "\n").encode()


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(event), event)


def _event(payload: dict | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return _chunk(b"data: " + text.encode() + b"\n\n")


def _respond(writer: asyncio.Transport, status: str, body: bytes, kind: str) -> None:
    writer.write(
        f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _answer_whole(writer: asyncio.Transport, request: dict, chat: bool) -> None:
    """A completion without streaming: the prompt's last word (module docstring)."""
    if chat:
        prompt = (request.get("messages") or [{}])[-1].get("content", "")
    else:
        prompt = request.get("prompt", "")
    words = prompt.split()
    text = words[-1] if words else ""
    choice = {"index": 0, "finish_reason": "stop"}
    choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
    usage = {"prompt_tokens": len(words), "completion_tokens": 1, "total_tokens": len(words) + 1}
    body = {
        "id": "cmpl-whole",
        "object": "chat.completion" if chat else "text_completion",
        "model": request.get("model", "fake"),
        "choices": [choice],
        "usage": usage,
    }
    _respond(writer, "200 OK", json.dumps(body).encode(), "application/json")


async def _stream(
    state: State,
    writer: asyncio.Transport,
    request: dict,
    chat: bool,
    t_recv: float,
    t_read: float,
) -> bool:
    """Streams one completion; returns False when the connection must close."""
    model = request.get("model", "fake")
    options = dict(parse_qsl(urlsplit(model).query))
    mode = options.get("mode", "ok")
    ttft = float(options.get("ttft_ms", 20)) / 1000
    itl = float(options.get("itl_ms", 5)) / 1000
    requested = int(request.get("max_completion_tokens" if chat else "max_tokens", 16))
    served = int(options.get("serve_len", requested))
    if chat:
        prompt = " ".join(m.get("content", "") for m in request.get("messages", []))
    else:
        prompt = request.get("prompt", "")
    prompt_tokens = len(prompt.split())
    response_id = f"{'chatcmpl' if chat else 'cmpl'}-{next(state.ids)}"
    if mode == "http500":
        body = json.dumps({"error": {"message": "fake internal error", "code": 500}}).encode()
        _respond(writer, "500 Internal Server Error", body, "application/json")
        return True
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    base = {"id": response_id, "created": 0, "model": model}
    # Rendered once per request: the server's own CPU per token must stay small, or its
    # event loop lags and its ground truth with it.
    if chat:
        choice = {"index": 0, "delta": {"content": " t<TOKEN>"}, "finish_reason": "<FINISH>"}
        message = base | {"object": "chat.completion.chunk", "choices": [choice]}
    else:
        choice = {"index": 0, "text": " t<TOKEN>", "finish_reason": "<FINISH>"}
        message = base | {"object": "text_completion", "choices": [choice]}
    rendered = json.dumps(message, separators=(",", ":")).replace("%", "%%")
    rendered = rendered.replace("<TOKEN>", "%d").replace('"<FINISH>"', "%b")
    template = b"data: " + rendered.encode() + b"\n\n"
    writes: list[float] = []
    truth = {
        "t_recv": t_recv,
        "t_read": t_read,
        "writes": writes,
        "served": served,
        "requested": requested,
        "prompt_tokens": prompt_tokens,
    }
    if options.get("keep") == "messages" and chat:
        truth["messages"] = request.get("messages")  # a session's history, checked by tests
    state.truth[response_id] = truth
    state.running += 1
    try:
        deadline = t_recv + ttft
        sent = 0
        while sent < served:
            delay = deadline - perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            # Late (a busy server): every token that is due goes out in one write.
            out = []
            first = sent
            now = perf_counter()
            while sent < served and deadline <= now:
                finish = b'"length"' if sent == served - 1 else b"null"
                out.append(_chunk(template % (sent, finish)))
                sent += 1
                deadline += itl
            if mode == "malformed" and sent >= 2:
                out.append(_chunk(b"data: {not json\n\n"))
            if mode == "stream_error" and sent >= 2:
                out.append(_event({"object": "error", "message": "fake stream error"}))
            # Stamped just before the write: the client cannot have these bytes any earlier,
            # even if this process is preempted around the write.
            stamp = perf_counter()
            writer.write(b"".join(out))
            writes.extend([stamp] * (sent - first))
            if first == 0:
                state.ttft_sum += stamp - t_recv
                state.ttft_count += 1
            if mode == "drop" and sent >= int(options.get("drop_after", 3)):
                writer.abort()
                return False
            if mode in ("malformed", "stream_error") and sent >= 2:
                break
        tail = []
        if mode != "no_usage" and (request.get("stream_options") or {}).get("include_usage"):
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": sent,
                "total_tokens": prompt_tokens + sent,
            }
            tail.append(_event(base | {"choices": [], "usage": usage}))
        tail.append(_event("[DONE]"))
        tail.append(b"0\r\n\r\n")
        writer.write(b"".join(tail))
        state.counters["prompt_tokens"] += prompt_tokens
        state.counters["generation_tokens"] += sent
        state.counters["prefix_cache_queries"] += prompt_tokens
        state.counters["prefix_cache_hits"] += prompt_tokens // 2
        return True
    finally:
        state.running -= 1


class _Connection(asyncio.Protocol):
    """Reads requests straight from the transport, so ``t_recv`` is the moment the last byte
    of a request arrived, not when a busy loop got round to a coroutine."""

    def __init__(self, state: State):
        self.state = state
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.authorization: str | None = None  # the request's Authorization header
        self.t_read = 0.0  # when the loop read the current request

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received(data, perf_counter())

    def received(self, data: bytes, now: float) -> None:
        """Bytes that arrived at ``now`` (a ``StampedSocket`` gives the kernel's stamp)."""
        self.buffer += data
        if not self.busy:
            self._next(now)

    def _next(self, now: float) -> None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        lines = self.buffer[:end].decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", 0))
        if len(self.buffer) < end + 4 + length:
            return
        body = self.buffer[end + 4 : end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        method, target, _ = lines[0].split(" ", 2)
        self.busy = True
        self.authorization = headers.get("authorization")
        self.t_read = perf_counter()
        asyncio.get_running_loop().create_task(self._answer(method, target, body, now))

    async def _answer(self, method: str, target: str, body: bytes, t_recv: float) -> None:
        state, transport = self.state, self.transport
        path = urlsplit(target).path
        keep = True
        refused = False
        if state.api_key is not None and path.startswith("/v1/"):
            refused = self.authorization != f"Bearer {state.api_key}"
            state.auth["refused" if refused else "accepted"] += 1
        if refused:
            _respond(transport, "401 Unauthorized", b'{"error": "bad key"}', "application/json")
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            request = json.loads(body)
            unknown = [name for name in state.refused_fields if name in request]
            if unknown:
                message = f"Unrecognized request argument supplied: {unknown[0]}"
                error = json.dumps({"error": {"message": message, "type": "invalid_request_error"}})
                _respond(transport, "400 Bad Request", error.encode(), "application/json")
            elif request.get("stream") is False:
                _answer_whole(transport, request, path.endswith("chat/completions"))
            else:
                chat = path.endswith("chat/completions")
                keep = await _stream(state, transport, request, chat, t_recv, self.t_read)
        elif method == "GET" and path == "/v1/models":
            data = {"object": "list", "data": [{"id": "fake", "object": "model"}]}
            _respond(transport, "200 OK", json.dumps(data).encode(), "application/json")
        elif method == "GET" and path == "/metrics":
            _respond(transport, "200 OK", state.metrics(), "text/plain; version=0.0.4")
        elif method == "GET" and path == "/auth":
            _respond(transport, "200 OK", json.dumps(state.auth).encode(), "application/json")
        elif method == "GET" and path == "/truth":
            _respond(transport, "200 OK", json.dumps(state.truth).encode(), "application/json")
        elif method == "POST" and path == "/truth/reset":
            state.truth.clear()
            _respond(transport, "200 OK", b"{}", "application/json")
        else:
            _respond(transport, "404 Not Found", b'{"error": "not found"}', "application/json")
        self.busy = False
        if not keep:
            return
        if self.buffer:
            self._next(perf_counter())


async def serve(port: int, api_key: str | None = None, refused_fields=()) -> None:
    state = State()
    state.api_key = api_key
    state.refused_fields = tuple(refused_fields)
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", port), backlog=1024)
    listener.setblocking(False)
    print(f"PORT {listener.getsockname()[1]}", flush=True)
    with listener:
        while True:
            connection, _ = await loop.sock_accept(listener)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            protocol = _Connection(state)
            if KERNEL_STAMPS:  # requests timed by their arrival, as the client times answers
                protocol.connection_made(StampedSocket(loop, connection, protocol))
            else:
                await loop.connect_accepted_socket(lambda p=protocol: p, connection)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--refuse-field", action="append", default=[])
    args = parser.parse_args()
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner, contextlib.suppress(KeyboardInterrupt):
        runner.run(serve(args.port, args.api_key, args.refuse_field))
    sys.exit(0)


class FakeServer:
    """The server in a child process, for tests and benchmarks: ``with FakeServer() as s``.

    ``cpu`` pins the child to one core (benchmarks keep client and server apart).
    """

    def __init__(
        self, cpu: int | None = None, api_key: str | None = None, refuse_fields: tuple = ()
    ):
        self.cpu = cpu
        self.api_key = api_key
        self.refuse_fields = refuse_fields
        self.process: subprocess.Popen | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeServer:
        command = [sys.executable, "-m", "tests.agents.fake_openai_server"]
        if self.api_key is not None:
            command += ["--api-key", self.api_key]
        for name in self.refuse_fields:
            command += ["--refuse-field", name]
        if self.cpu is not None:
            command = ["taskset", "-c", str(self.cpu), *command]
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("PORT "):
            self.process.kill()
            raise RuntimeError(f"fake server did not start: {line!r}")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc_info) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _call(self, method: str, path: str) -> dict:
        request = urllib.request.Request(f"{self.base_url}{path}", method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def truth(self) -> dict[str, dict]:
        """What the server did, per response id (see the module docstring)."""
        return self._call("GET", "/truth")

    def auth(self) -> dict[str, int]:
        """How many ``/v1/`` requests carried the key, and how many did not."""
        return self._call("GET", "/auth")

    def reset(self) -> None:
        self._call("POST", "/truth/reset")


if __name__ == "__main__":
    main()
