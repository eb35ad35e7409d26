"""OpenAI-compatible streaming requests: the bytes sent and the timing of what comes back.

Guarantees:

- ``encode_request`` builds the whole HTTP request ahead of time, so nothing but one socket
  write happens between the start timestamp and the server.
- Every request streams with ``stream_options.include_usage`` and ``ignore_eos`` (vLLM's
  extension), so the server reports exact token counts and serves the requested length.
- ``send_request`` never raises for a failed request: the record carries ``error_kind``
  (``http_<status>``, ``malformed_sse``, ``stream_error``, ``no_content`` or one of the
  transport kinds of ``agents.loadgen.http``) and a sample message.
"""

from __future__ import annotations

import json
import json.scanner
from time import perf_counter
from typing import Literal

from agents.loadgen.activity import Activity
from agents.loadgen.http import ConnectionPool, HttpError, Origin, build_request
from agents.loadgen.records import RequestRecord
from agents.loadgen.sse import SseParser

Endpoint = Literal["completions", "chat"]

ENDPOINT_PATHS: dict[str, str] = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

# Error bodies are kept only this long as the sample message.
_MAX_ERROR_BODY = 2048
# The C scanner behind json.loads, called directly: json.loads spends as long again in
# Python-level wrappers (encoding detection, whitespace checks) as in parsing a chunk.
_scan = json.scanner.make_scanner(json.JSONDecoder())


def _stdlib_loads(payload: bytes) -> object:
    text = payload.decode()
    if text[:1].isspace() or text[-1:].isspace():
        text = text.strip()
    try:
        message, end = _scan(text, 0)
    except StopIteration:
        raise ValueError("no JSON value") from None
    if end != len(text):
        raise ValueError("data after the JSON value")
    return message


def _stdlib_dumps(body: dict) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


try:
    # orjson parses a streamed chunk several times faster: it is most of a token's cost;
    # and encodes a session's growing history while its requests are in flight.
    from orjson import dumps as _dumps
    from orjson import loads as _loads
except ImportError:  # a platform without its wheels
    _loads = _stdlib_loads
    _dumps = _stdlib_dumps


def _parse_object(payload: bytes) -> dict:
    """One SSE payload as a JSON object (stdlib); ``HttpError("malformed_sse")`` otherwise."""
    try:
        message = _stdlib_loads(payload)
    except ValueError:
        message = None
    if not isinstance(message, dict):
        raise HttpError("malformed_sse", f"not a JSON object: {payload[:200]!r}")
    return message


def request_body(
    *,
    endpoint: Endpoint,
    model: str,
    prompt: str,
    output_len: int,
    ignore_eos: bool = True,
    messages: list[dict] | None = None,
) -> dict:
    """The JSON body ``vllm bench serve`` sends, for the given endpoint; ``messages`` (chat
    only) replaces the single user message of ``prompt`` with a whole conversation."""
    body: dict = {"model": model, "temperature": 0.0, "stream": True}
    if endpoint == "chat":
        body["messages"] = (
            messages if messages is not None else [{"role": "user", "content": prompt}]
        )
        body["max_completion_tokens"] = output_len
    else:
        body["prompt"] = prompt
        body["max_tokens"] = output_len
    body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    return body


def encode_request(
    origin: Origin,
    *,
    endpoint: Endpoint,
    model: str,
    prompt: str,
    output_len: int,
    api_key: str | None = None,
    ignore_eos: bool = True,
    messages: list[dict] | None = None,
) -> bytes:
    """The exact HTTP bytes of one streaming request (``messages``: as ``request_body``)."""
    body = _dumps(
        request_body(
            endpoint=endpoint,
            model=model,
            prompt=prompt,
            output_len=output_len,
            ignore_eos=ignore_eos,
            messages=messages,
        )
    )
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return build_request(origin, "POST", origin.path(ENDPOINT_PATHS[endpoint]), body, headers)


class StreamConsumer:
    """The ``ResponseSink`` of one streaming request: times content messages into a record.

    Runs inside the transport callback; it does the least work that still reads every
    message (all of a read's in one JSON parse), and raises ``HttpError`` to abort a broken
    stream.
    """

    __slots__ = (
        "_activity",
        "_error_body",
        "_last",
        "_parser",
        "_record",
        "_reply",
        "done",
        "status",
    )

    def __init__(
        self,
        record: RequestRecord,
        activity: Activity | None = None,
        reply: list[str] | None = None,
    ):
        self._record = record
        self._reply = reply
        self._activity = activity
        self._parser = SseParser()
        self._last = 0.0
        self._error_body: list[bytes] | None = None
        self.status = 0
        self.done = False

    def on_head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        if status != 200:
            self._error_body = []

    def on_body(self, data: bytes, now: float) -> None:
        if self._activity is not None:
            self._activity.last = now
        if self._error_body is not None:
            if sum(map(len, self._error_body)) < _MAX_ERROR_BODY:
                self._error_body.append(data)
            return
        events = self._parser.feed(data)
        if events and events[-1] == b"[DONE]":  # the stream's end, often read with the rest
            self.done = True
            events.pop()
        messages: list = events  # bytes: each parsed on its own below
        if len(events) > 1:
            # A busy stream's read holds many messages: one parse of them all costs a third
            # less and is as strict. What does not give one object per message (a [DONE], a
            # broken message) is read message by message below, which names the problem.
            try:
                parsed = _loads(b"[" + b",".join(events) + b"]")
            except ValueError:
                parsed = None
            if type(parsed) is list and len(parsed) == len(events):
                messages = parsed
        record = self._record
        reply = self._reply
        for payload, message in zip(events, messages, strict=True):
            if type(message) is not dict:
                message = self._message(payload)
                if message is None:
                    continue
            choices = message.get("choices")
            if choices:
                if record.ttft is None:
                    record.ttft = now - record.start
                    record.response_id = message.get("id")
                else:
                    record.itl.append(now - self._last)
                self._last = now
                record.chunks += 1
                if reply is not None:
                    reply.append(_content(choices[0]))
            usage = message.get("usage")
            if usage:
                record.output_tokens = usage.get("completion_tokens")
                record.prompt_tokens = usage.get("prompt_tokens")
            elif not choices and ("error" in message or message.get("object") == "error"):
                raise HttpError("stream_error", _error_text(payload))

    def _message(self, payload: bytes) -> dict | None:
        """One SSE payload as a JSON object; None for ``[DONE]``; ``HttpError`` otherwise."""
        # The fast parser for a well-formed object; anything else the careful way, which
        # names the problem. (UnicodeDecodeError and both JSON errors are ValueErrors.)
        try:
            message = _loads(payload)
        except ValueError:
            message = None
        if type(message) is dict:
            return message
        if payload == b"[DONE]":
            self.done = True
            return None
        return _parse_object(payload)

    def on_end(self) -> None:
        pass

    def finish(self) -> None:
        """Decides the record's outcome once the response is complete."""
        record = self._record
        if self._error_body is not None:
            body = b"".join(self._error_body)[:_MAX_ERROR_BODY]
            record.fail(f"http_{self.status}", _error_text(body) or f"HTTP {self.status}")
        elif record.ttft is None:
            record.fail("no_content", "the stream ended without a message carrying choices")
        else:
            record.latency = self._last - record.start
            record.success = True

    def abort(self, error: HttpError) -> None:
        record = self._record
        if record.ttft is not None:
            record.latency = self._last - record.start
        record.fail(error.kind, str(error))


def _content(choice: object) -> str:
    """The text one streamed choice adds: a chat delta's content or a completion's text."""
    if not isinstance(choice, dict):
        return ""
    delta = choice.get("delta")
    text = delta.get("content") if isinstance(delta, dict) else choice.get("text")
    return text if isinstance(text, str) else ""


def _error_text(body: bytes) -> str:
    """The message of an OpenAI-style error body, else the body itself (shortened)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        parsed = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(parsed, dict):
        error = parsed.get("error", parsed)
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"][:300]
        if isinstance(error, str):
            return error[:300]
    return text[:300]


async def send_request(
    pool: ConnectionPool,
    request: bytes,
    record: RequestRecord,
    *,
    timeout: float | None,
    activity: Activity | None = None,
    reply: list[str] | None = None,
) -> RequestRecord:
    """Sends one prepared request and fills ``record``; failures end up in the record.
    ``activity`` counts it in flight and hears every read of its response; ``reply``, when
    given, receives the text of every content message (a session's history needs it)."""
    consumer = StreamConsumer(record, activity, reply)
    record.start = perf_counter()
    if activity is not None:
        if activity.in_flight == 0:
            activity.last = record.start  # silence counts from the first request waiting
        activity.in_flight += 1
    try:
        await pool.send(request, consumer, timeout=timeout)
    except HttpError as error:
        consumer.abort(error)
    else:
        consumer.finish()
    finally:
        if activity is not None:
            activity.in_flight -= 1
    record.finished = perf_counter()
    return record
