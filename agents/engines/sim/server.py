"""The simulator's OpenAI-compatible server: vLLM's API and metrics, simulated timing.

``python -m agents.engines.sim MODEL_SPEC --gpu H100 --host H --port P [vllm serve flags]
[--speed S] [--seed N]``

Guarantees:

- Serves ``/v1/completions`` and ``/v1/chat/completions`` (streaming SSE with vLLM's chunk
  shapes, ``stream_options.include_usage``, or one JSON body), ``/v1/models``, ``/health``,
  ``/version`` and ``/metrics`` (vLLM's metric names, plus ``benchsite:simulated``), over
  HTTP/1.1 keep-alive.
- Tokens: a prompt's tokens are its whitespace-separated words (the load generator's
  prompts are words); output tokens are words drawn from a generator seeded by ``--seed``
  and the request's order of arrival, so a run is repeatable. ``max_tokens`` is always
  served in full (as with ``ignore_eos``).
- Timing: an engine loop runs the V1-style scheduler; each step lasts its roofline time
  divided by ``--speed``, measured against absolute deadlines so steps never drift, and the
  tokens of a step are written when it ends. Server-side histograms record simulated
  seconds; a client at ``--speed S`` sees latencies S times shorter.
- Labelled simulated everywhere: the log's first line, every response's
  ``system_fingerprint`` and ``X-Benchsite-Simulated`` header, ``/v1/models``' ``owned_by``,
  ``/version``, and the ``benchsite:simulated`` gauge.
- Start-up prints vLLM-worded log lines (phases scaled by weight size, divided by
  ``--speed``) or, where vLLM would refuse the config, vLLM's kind of error and exit code 1.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import itertools
import json
import math
import random
import signal
import sys
import time
from collections.abc import Sequence
from urllib.parse import urlsplit

from agents.engines.sim.scheduler import Scheduler, SimRequest, prompt_block_hashes
from agents.engines.sim.startup import cold_start_seconds
from agents.hardware import (
    GIB,
    ModelFacts,
    ServeSettings,
    StartRefusal,
    StepModel,
    gpu_profile,
    load_model_facts,
    start_check,
)

SIM_VERSION = "benchsite-sim-1"
FINGERPRINT = f"{SIM_VERSION}-simulated"

_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an "
    "each which she do how their if will up other about out many then them these so some "
    "her would make like him into time has look two more write go see number no way could "
    "people"
)
_WORDS = tuple(_WORD_TEXT.split())
# Each output token's text, already JSON-encoded: a token costs no encoding at all.
_TOKENS_JSON = tuple(json.dumps(" " + word).encode() for word in _WORDS)

_BUCKETS = {
    "time_to_first_token_seconds": (
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
    ),
    "inter_token_latency_seconds": (
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0,
    ),
    "e2e_request_latency_seconds": (
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
    ),
    "request_queue_time_seconds": (
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
    ),
}  # fmt: skip


class Histogram:
    def __init__(self, buckets: Sequence[float]):
        self.buckets = tuple(buckets)
        self.counts = [0] * len(self.buckets)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        for bound, count in zip(self.buckets, self.counts, strict=False):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


class Client:
    """One request's link back to its HTTP connection."""

    __slots__ = ("chat", "conn", "created", "id", "include_usage", "model", "rng", "stream")

    def __init__(self, conn, request_id, model, chat, stream, include_usage, rng):
        self.conn = conn
        self.id = request_id
        self.model = model
        self.chat = chat
        self.stream = stream
        self.include_usage = include_usage
        self.rng = rng
        self.created = int(time.time())


class SimServer:
    """The engine loop and the HTTP side, on one asyncio loop."""

    def __init__(
        self,
        *,
        model: ModelFacts,
        gpu_name: str,
        settings: ServeSettings,
        scheduler: Scheduler,
        served_model_name: str,
        speed: float = 1.0,
        seed: int = 0,
    ):
        self.model = model
        self.gpu_name = gpu_name
        self.settings = settings
        self.scheduler = scheduler
        self.name = served_model_name
        self.speed = speed
        self.seed = seed
        self.ids = itertools.count()
        self.wakeup = asyncio.Event()
        self.t0 = 0.0
        self.sim_now = 0.0
        self.histograms = {name: Histogram(b) for name, b in _BUCKETS.items()}
        self.clients: dict[int, Client] = {}
        self.max_slip = 0.0  # worst lateness of a step's end, wall seconds
        self.slips_over_1ms = 0
        self.steps_timed = 0
        self.labels = f'engine="0",model_name="{served_model_name}"'

    # -- clock -----------------------------------------------------------------------------

    def _sim_time_of(self, wall: float) -> float:
        return (wall - self.t0) * self.speed

    async def run_engine(self) -> None:
        loop = asyncio.get_running_loop()
        self.t0 = loop.time()
        scheduler = self.scheduler
        while True:
            if not scheduler.has_work:
                self.wakeup.clear()
                await self.wakeup.wait()
                # Idle time passes in simulation too: the step starts when work arrived.
                self.sim_now = max(self.sim_now, self._sim_time_of(loop.time()))
            step = scheduler.schedule()
            if step is None:
                # Only waiting requests that cannot be admitted yet and nothing running:
                # cannot happen with a valid plan, but never spin.
                await asyncio.sleep(0.001)
                continue
            end = self.sim_now + step.duration
            deadline = self.t0 + end / self.speed
            # The loop's timers wake up to ~1 ms late (epoll rounds timeouts up to whole
            # milliseconds): sleep to just before the deadline, then yield until it passes.
            delay = deadline - loop.time()
            if delay > 0.002:
                await asyncio.sleep(delay - 0.0015)
            while loop.time() < deadline:
                await asyncio.sleep(0)
            slip = loop.time() - deadline
            self.steps_timed += 1
            if slip > self.max_slip:
                self.max_slip = slip
            if slip > 0.001:
                self.slips_over_1ms += 1
            self.sim_now = end
            for request in scheduler.finish(step, end):
                self.clients.pop(request.id, None)

    # -- requests --------------------------------------------------------------------------

    def submit(self, client: Client, prompt_words: list[str], max_tokens: int) -> SimRequest:
        settings = self.settings
        hashes = (
            prompt_block_hashes(prompt_words, settings.block_size)
            if settings.enable_prefix_caching
            else ()
        )
        loop = asyncio.get_running_loop()
        arrival = max(self.sim_now, self._sim_time_of(loop.time()))
        request = SimRequest(
            client.id,
            max(1, len(prompt_words)),
            max_tokens,
            arrival=arrival,
            block_hashes=hashes,
            on_tokens=self._emit,
        )
        self.clients[client.id] = client
        self.scheduler.add(request)
        self.wakeup.set()
        return request

    def _emit(self, request: SimRequest, count: int, done: bool) -> None:
        client = self.clients.get(request.id)
        now = request.token_times[-1]
        if request.output == 1:
            self.histograms["time_to_first_token_seconds"].observe(now - request.arrival)
            if request.scheduled_at is not None:
                queued = request.scheduled_at - request.arrival
                self.histograms["request_queue_time_seconds"].observe(max(0.0, queued))
        else:
            gap = now - request.token_times[-2]
            self.histograms["inter_token_latency_seconds"].observe(gap)
        if done:
            self.histograms["e2e_request_latency_seconds"].observe(now - request.arrival)
        if client is None or client.conn.closed:
            if client is not None:
                self.scheduler.abort(request)
                self.clients.pop(request.id, None)
            return
        client.conn.on_token(client, request, client.rng.randrange(len(_WORDS)), done)

    # -- metrics ---------------------------------------------------------------------------

    def metrics_text(self) -> bytes:
        s = self.scheduler
        labels = self.labels
        lines = [
            "# benchsite vLLM simulator: every value below is simulated",
            f'benchsite:simulated{{{labels},gpu="{self.gpu_name}",speed="{self.speed}"}} 1',
            f"vllm:num_requests_running{{{labels}}} {len(s.running)}",
            f"vllm:num_requests_waiting{{{labels}}} {len(s.waiting)}",
            f"vllm:kv_cache_usage_perc{{{labels}}} {s.pool.usage!r}",
            f"vllm:num_preemptions_total{{{labels}}} {s.preemptions}",
            f"vllm:prefix_cache_queries_total{{{labels}}} {s.prefix_queries}",
            f"vllm:prefix_cache_hits_total{{{labels}}} {s.prefix_hits}",
            f"vllm:prompt_tokens_total{{{labels}}} {s.prompt_tokens}",
            f"vllm:generation_tokens_total{{{labels}}} {s.generation_tokens}",
            f'vllm:cache_config_info{{block_size="{self.settings.block_size}",'
            f'enable_prefix_caching="{self.settings.enable_prefix_caching}",{labels},'
            f'gpu_memory_utilization="{self.settings.gpu_memory_utilization}",'
            f'num_gpu_blocks="{s.pool.num_blocks}"}} 1.0',
            # How faithfully wall time follows simulated time (benchmarks/sim_capacity.py).
            f"benchsite:sim_max_step_slip_seconds{{{labels}}} {self.max_slip!r}",
            f"benchsite:sim_steps_total{{{labels}}} {self.steps_timed}",
            f"benchsite:sim_steps_late_total{{{labels}}} {self.slips_over_1ms}",
        ]
        for name, histogram in self.histograms.items():
            lines.extend(histogram.lines(f"vllm:{name}", labels))
        return ("\n".join(lines) + "\n").encode()


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


def _dumps(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; requests are answered in order, one at a time."""

    def __init__(self, server: SimServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False
        self.closed = False
        self.keep_alive = True
        self._template: tuple[bytes, bytes, bytes, dict] | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def connection_lost(self, exc) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        while not self.busy and not self.closed:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                length = int(headers.get("content-length", "0"))
                method, target, _version = head[0].split(" ", 2)
            except ValueError:
                self._respond(400, {"error": {"message": "malformed request"}}, close=True)
                return
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.keep_alive = headers.get("connection", "").lower() != "close"
            self._route(method, urlsplit(target).path, body)

    # -- responses -------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def _respond(self, status: int, payload: object, *, close: bool = False, raw=None) -> None:
        body = raw if raw is not None else _dumps(payload)
        kind = "text/plain; version=0.0.4" if raw is not None else "application/json"
        self._write(
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\nContent-Type: {kind}\r\n"
            f"Content-Length: {len(body)}\r\nX-Benchsite-Simulated: 1\r\n\r\n".encode()
            + body
        )
        if close or not self.keep_alive:
            self.closed = True
            if self.transport is not None:
                self.transport.close()

    def _error(self, status: int, message: str) -> None:
        kind = "BadRequestError" if status == 400 else "NotFoundError"
        self._respond(status, {"error": {"message": message, "type": kind, "code": status}})

    def _route(self, method: str, path: str, body: bytes) -> None:
        server = self.server
        if path == "/health":
            self._respond(200, None, raw=b"")
        elif path == "/metrics":
            self._respond(200, None, raw=server.metrics_text())
        elif path == "/v1/models":
            self._respond(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": server.name,
                            "object": "model",
                            "created": int(time.time()),
                            "owned_by": "benchsite-simulator",
                            "root": server.model.name,
                            "max_model_len": server.settings.max_model_len,
                            "simulated": True,
                        }
                    ],
                },
            )
        elif path == "/version":
            self._respond(200, {"version": SIM_VERSION, "simulated": True})
        elif path in ("/v1/completions", "/v1/chat/completions"):
            if method != "POST":
                self._error(405, "use POST")
                return
            self._generate(body, chat=path.endswith("chat/completions"))
        else:
            self._error(404, f"no route {path}")

    def _generate(self, body: bytes, *, chat: bool) -> None:
        server = self.server
        try:
            request = json.loads(body)
            if not isinstance(request, dict):
                raise ValueError("expected a JSON object")
        except ValueError as exc:
            self._error(400, f"invalid JSON body: {exc}")
            return
        if request.get("model") != server.name:
            self._error(404, f"The model `{request.get('model')}` does not exist.")
            return
        words = self._prompt_words(request, chat)
        if words is None:
            self._error(400, "give a prompt (completions) or messages (chat)")
            return
        limit = server.settings.max_model_len
        max_tokens = request.get("max_completion_tokens") if chat else None
        max_tokens = max_tokens or request.get("max_tokens")
        if max_tokens is None:
            max_tokens = max(1, limit - len(words))
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            self._error(400, "max_tokens must be an integer of at least 1")
            return
        if len(words) + max_tokens > limit:
            self._error(
                400,
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {len(words) + max_tokens} tokens ({len(words)} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion.",
            )
            return
        seq = next(server.ids)
        prefix = "chatcmpl" if chat else "cmpl"
        stream = bool(request.get("stream"))
        options = request.get("stream_options") or {}
        client = Client(
            self,
            seq,
            server.name,
            chat,
            stream,
            bool(isinstance(options, dict) and options.get("include_usage")),
            random.Random(server.seed * 1_000_003 + seq),  # noqa: S311 - text, not secrets
        )
        client.id = seq
        self.response_id = f"{prefix}-sim{seq:08d}"
        self.text_parts: list[str] = []
        self.busy = True
        if stream:
            self._write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nX-Benchsite-Simulated: 1\r\n\r\n"
            )
        server.submit(client, words, max_tokens)

    @staticmethod
    def _prompt_words(request: dict, chat: bool) -> list[str] | None:
        if chat:
            messages = request.get("messages")
            if not isinstance(messages, list) or not messages:
                return None
            words: list[str] = []
            for message in messages:
                content = message.get("content") if isinstance(message, dict) else None
                if isinstance(content, list):  # content parts
                    content = " ".join(
                        part.get("text", "") for part in content if isinstance(part, dict)
                    )
                # One token for the role marker of the chat template.
                words.append(f"<|{message.get('role', 'user')}|>")
                words.extend(str(content or "").split())
            return words
        prompt = request.get("prompt")
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return [str(token) for token in prompt]
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            return None
        return prompt.split() or [""]

    @staticmethod
    def _event(payload: object) -> bytes:
        data = b"data: " + (payload if isinstance(payload, bytes) else _dumps(payload)) + b"\n\n"
        return f"{len(data):x}\r\n".encode() + data + b"\r\n"

    def _stream_template(self, client: Client) -> tuple[bytes, bytes, bytes, dict]:
        """The chunk around the token text, rendered once per response: a token then costs
        one small JSON string encoding, which keeps step timing exact at high concurrency."""
        base = {
            "id": self.response_id,
            "created": client.created,
            "model": client.model,
            "system_fingerprint": FINGERPRINT,
        }
        marker = "\x00token\x00"
        if client.chat:
            choice = {"index": 0, "delta": {"content": marker}, "logprobs": None}
        else:
            choice = {"index": 0, "text": marker, "logprobs": None}
        choice["finish_reason"] = None
        if not client.chat:
            choice["stop_reason"] = None
        kind = "chat.completion.chunk" if client.chat else "text_completion"
        rendered = _dumps({**base, "object": kind, "choices": [choice]})
        head, tail = rendered.split(_dumps(marker))
        tail_done = tail.replace(b'"finish_reason":null', b'"finish_reason":"length"', 1)
        return head, tail, tail_done, {**base, "object": kind}

    def on_token(self, client: Client, request: SimRequest, word: int, done: bool) -> None:
        if client.stream:
            if request.output == 1 or self._template is None:
                self._template = self._stream_template(client)
            head, tail, tail_done, base = self._template
            out = b""
            if client.chat and request.output == 1:
                # vLLM's first chat chunk carries the role; it comes with the first token.
                role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
                role.update({"logprobs": None, "finish_reason": None})
                out += self._event({**base, "choices": [role]})
            out += self._event(head + _TOKENS_JSON[word] + (tail_done if done else tail))
            if done:
                if client.include_usage:
                    out += self._event({**base, "choices": [], "usage": _usage(request)})
                out += self._event(b"[DONE]") + b"0\r\n\r\n"
            self._write(out)
        else:
            self.text_parts.append(" " + _WORDS[word])
            if done:
                text_all = "".join(self.text_parts)
                choice = (
                    {"index": 0, "message": {"role": "assistant", "content": text_all}}
                    if client.chat
                    else {"index": 0, "text": text_all}
                )
                choice.update({"logprobs": None, "finish_reason": "length"})
                self._respond(
                    200,
                    {
                        "id": self.response_id,
                        "object": "chat.completion" if client.chat else "text_completion",
                        "created": client.created,
                        "model": client.model,
                        "system_fingerprint": FINGERPRINT,
                        "choices": [choice],
                        "usage": _usage(request),
                    },
                )
        if done:
            self.busy = False
            if not self.keep_alive:
                self.closed = True
                if self.transport is not None:
                    self.transport.close()
            elif self.buffer:
                self._next()


def _usage(request: SimRequest) -> dict:
    return {
        "prompt_tokens": request.prompt_len,
        "completion_tokens": request.output,
        "total_tokens": request.prompt_len + request.output,
    }


# ---------------------------------------------------------------------------------------------
# Start-up
# ---------------------------------------------------------------------------------------------


def _log(source: str, where: str, text: str, level: str = "INFO") -> None:
    stamp = time.strftime("%m-%d %H:%M:%S")
    print(f"({source} pid=0) {level} {stamp} [sim:{where}] {text}", flush=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vllm serve (benchsite simulator)")
    parser.add_argument("model_spec", help="preset name or model facts JSON file")
    parser.add_argument("--gpu", required=True, help="H100, H200, B200, A100, L40S, RTX 4090")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--served-model-name")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated s per wall s")
    parser.add_argument(
        "--startup-speed", type=float, help="speed of the simulated start-up (default --speed)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--max-num-batched-tokens", type=int)
    parser.add_argument("--gpu-memory-utilization", type=float)
    parser.add_argument("--tensor-parallel-size", type=int)
    parser.add_argument("--pipeline-parallel-size", type=int)
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--enable-chunked-prefill", action=argparse.BooleanOptionalAction)
    parser.add_argument("--kv-cache-dtype")
    parser.add_argument("--dtype")
    parser.add_argument("--quantization")
    parser.add_argument("--block-size", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--swap-space", type=float)
    return parser


FLAG_NAMES = (
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "kv_cache_dtype",
    "block_size",
    "enforce_eager",
)


def build(args: argparse.Namespace) -> SimServer:
    """Checks the configuration like vLLM (``agents.hardware.start_check``) and builds the
    server; raises ``StartRefusal``."""
    try:
        model = load_model_facts(args.model_spec)
        gpu = gpu_profile(args.gpu)
    except ValueError as exc:
        raise StartRefusal(
            f"ValueError: Invalid repository ID or local directory: {exc}",
            summary="the simulator does not know this model or GPU",
        ) from None
    if args.speed <= 0 or not math.isfinite(args.speed):
        raise StartRefusal(
            "error: argument --speed: must be a positive number", summary="a bad --speed"
        )
    flags = {name: getattr(args, name) for name in FLAG_NAMES}
    settings, plan = start_check(model, gpu, flags)
    scheduler = Scheduler(settings, StepModel(model, gpu, settings, plan))
    return SimServer(
        model=model,
        gpu_name=gpu.name,
        settings=settings,
        scheduler=scheduler,
        served_model_name=args.served_model_name or model.name,
        speed=args.speed,
        seed=args.seed,
    )


def _pause(seconds: float, speed: float) -> None:
    time.sleep(seconds / speed)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _log("APIServer", "banner", f"SIMULATED vLLM ({SIM_VERSION}): no GPU is used; GPU={args.gpu}")
    try:
        server = build(args)
    except StartRefusal as exc:
        print("Traceback (most recent call last):", flush=True)
        print(str(exc), flush=True)
        print("RuntimeError: Engine core initialization failed. See root cause above.", flush=True)
        return 1
    settings, model = server.settings, server.model
    plan = server.scheduler.step_model.plan
    phases = cold_start_seconds(model, settings)
    speed = args.startup_speed or args.speed
    _log("APIServer", "model", f"Using max model len {settings.max_model_len}")
    _pause(phases["init"], speed)
    _log(
        "EngineCore",
        "core",
        f"Initializing a V1 LLM engine (v{SIM_VERSION}) with config: model='{model.name}', "
        f"tensor_parallel_size={settings.tensor_parallel_size}",
    )
    _pause(phases["weights"], speed)
    _log(
        "Worker",
        "gpu_model_runner",
        f"Model loading took {plan.weight_bytes / GIB:.4f} GiB memory and "
        f"{phases['weights']:.6f} seconds",
    )
    _pause(phases["profile"], speed)
    _log("Worker", "gpu_worker", f"Available KV cache memory: {plan.kv_bytes / GIB:.2f} GiB")
    concurrency = plan.kv_tokens / settings.max_model_len
    _log(
        "EngineCore",
        "kv_cache_utils",
        f"GPU KV cache size: {plan.kv_tokens:,} tokens, Maximum concurrency for "
        f"{settings.max_model_len:,} tokens per request: {concurrency:.2f}x",
    )
    if not settings.enforce_eager:
        _pause(phases["graphs"], speed)
        _log(
            "Worker",
            "gpu_model_runner",
            f"Graph capturing finished in {phases['graphs']:.0f} secs, took 0.50 GiB",
        )
    init = phases["profile"] + phases["graphs"]
    _log(
        "EngineCore",
        "core",
        f"init engine (profile, create kv cache, warmup model) took {init:.2f} s",
    )
    _pause(phases["api"], speed)
    with contextlib.suppress(KeyboardInterrupt):
        # uvloop when installed: its transport writes cost about half of asyncio's.
        from agents.loadgen import event_loop_runner

        with event_loop_runner() as runner:
            runner.run(_serve(server, args.host, args.port))
    return 0


async def _serve(server: SimServer, host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    listener = await loop.create_server(lambda: Connection(server), host, port, backlog=4096)
    bound = listener.sockets[0].getsockname()[1]
    _log("APIServer", "entry", f"Starting vLLM server on http://{host}:{bound}")
    engine = asyncio.create_task(server.run_engine())
    await stop.wait()
    _log("APIServer", "entry", "Shutting down (simulated engine)")
    engine.cancel()
    listener.close()
    with contextlib.suppress(asyncio.CancelledError):
        await engine


if __name__ == "__main__":
    sys.exit(main())
