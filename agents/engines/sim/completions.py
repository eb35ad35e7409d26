"""The OpenAI completion API as the simulator speaks it: a request body in, vLLM's chunk and
body shapes out.

Guarantees: a request is refused with vLLM's status and wording (unknown model 404; no
prompt, a bad ``max_tokens`` or one past the context length 400), or read into the prompt's
words and the tokens to generate. Every chunk and body carries ``system_fingerprint``
``FINGERPRINT`` (labelled simulated); a prompt's tokens are its whitespace-separated words.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass

from agents.engines.sim.scheduler import SimRequest

SIM_VERSION = "benchsite-sim-1"
FINGERPRINT = f"{SIM_VERSION}-simulated"

_WORD_TEXT = (
    "the of and to in is you that it he was for on are as with his they at be this have "
    "from or one had by word but not what all were we when your can said there use an "
    "each which she do how their if will up other about out many then them these so some "
    "her would make like him into time has look two more write go see number no way could "
    "people"
)
WORDS = tuple(_WORD_TEXT.split())
# Each output token's text, already JSON-encoded: a token costs no encoding at all.
_TOKENS_JSON = tuple(json.dumps(" " + word).encode() for word in WORDS)


def dumps(payload: object) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


class Client:
    """One request's link back to its HTTP connection."""

    __slots__ = (
        "chat",
        "conn",
        "created",
        "id",
        "include_usage",
        "model",
        "pending",
        "rng",
        "started",
        "stream",
    )

    def __init__(self, conn, request_id, model, chat, stream, include_usage, rng):
        self.conn = conn
        self.id = request_id
        self.model = model
        self.chat = chat
        self.stream = stream
        self.include_usage = include_usage
        self.rng = rng
        self.created = int(time.time())
        # Tokens made but not yet due at the client: (when, words, last), in order.
        self.pending: deque[tuple[float, tuple[int, ...], bool]] = deque()
        self.started = False  # its first token has been written


class BadRequest(ValueError):
    """A request vLLM would refuse: ``status`` and ``message`` are its answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class CompletionRequest:
    """What the engine needs of one accepted request."""

    words: list[str]
    max_tokens: int
    stream: bool
    include_usage: bool


def read_request(
    body: bytes, *, chat: bool, served_model_name: str, max_model_len: int
) -> CompletionRequest:
    """The request in ``body``; raises ``BadRequest`` where vLLM would refuse it."""
    try:
        request = json.loads(body)
        if not isinstance(request, dict):
            raise ValueError("expected a JSON object")
    except ValueError as exc:
        raise BadRequest(400, f"invalid JSON body: {exc}") from None
    if request.get("model") != served_model_name:
        raise BadRequest(404, f"The model `{request.get('model')}` does not exist.")
    words = _prompt_words(request, chat)
    if words is None:
        raise BadRequest(400, "give a prompt (completions) or messages (chat)")
    limit = max_model_len
    max_tokens = request.get("max_completion_tokens") if chat else None
    max_tokens = max_tokens or request.get("max_tokens")
    if max_tokens is None:
        max_tokens = max(1, limit - len(words))
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise BadRequest(400, "max_tokens must be an integer of at least 1")
    if len(words) + max_tokens > limit:
        raise BadRequest(
            400,
            f"This model's maximum context length is {limit} tokens. However, you "
            f"requested {len(words) + max_tokens} tokens ({len(words)} in the messages, "
            f"{max_tokens} in the completion). Please reduce the length of the messages "
            "or completion.",
        )
    options = request.get("stream_options") or {}
    return CompletionRequest(
        words=words,
        max_tokens=max_tokens,
        stream=bool(request.get("stream")),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
    )


def role_marker(role: str) -> str:
    """The token a chat template puts before a message of ``role``, as one word."""
    return f"<|{role}|>"


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
            words.append(role_marker(str(message.get("role", "user"))))
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


def _event(payload: object) -> bytes:
    data = b"data: " + (payload if isinstance(payload, bytes) else dumps(payload)) + b"\n\n"
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


StreamTemplate = tuple[bytes, bytes, bytes, dict]


def stream_template(response_id: str, client: Client) -> StreamTemplate:
    """The chunk around the token text, rendered once per response: a token then costs
    one small JSON string encoding, which keeps step timing exact at high concurrency."""
    base = {
        "id": response_id,
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
    rendered = dumps({**base, "object": kind, "choices": [choice]})
    head, tail = rendered.split(dumps(marker))
    tail_done = tail.replace(b'"finish_reason":null', b'"finish_reason":"length"', 1)
    return head, tail, tail_done, {**base, "object": kind}


def stream_chunks(
    template: StreamTemplate,
    client: Client,
    request: SimRequest,
    words: tuple[int, ...],
    done: bool,
    first: bool,
) -> bytes:
    """The HTTP chunks (SSE events) that carry the tokens of one step, one word each (several
    when a speculative step kept more than one), in one event as vLLM streams them; the last
    one also ends the stream."""
    head, tail, tail_done, base = template
    out = b""
    if client.chat and first:
        # vLLM's first chat chunk carries the role; it comes with the first token.
        role = {"index": 0, "delta": {"role": "assistant", "content": ""}}
        role.update({"logprobs": None, "finish_reason": None})
        out += _event({**base, "choices": [role]})
    text = (
        _TOKENS_JSON[words[0]]
        if len(words) == 1
        else dumps("".join(" " + WORDS[word] for word in words))
    )
    out += _event(head + text + (tail_done if done else tail))
    if done:
        if client.include_usage:
            out += _event({**base, "choices": [], "usage": _usage(request)})
        out += _event(b"[DONE]") + b"0\r\n\r\n"
    return out


def completion_body(response_id: str, client: Client, request: SimRequest, text: str) -> dict:
    """The whole answer of a request that did not stream."""
    choice = (
        {"index": 0, "message": {"role": "assistant", "content": text}}
        if client.chat
        else {"index": 0, "text": text}
    )
    choice.update({"logprobs": None, "finish_reason": "length"})
    return {
        "id": response_id,
        "object": "chat.completion" if client.chat else "text_completion",
        "created": client.created,
        "model": client.model,
        "system_fingerprint": FINGERPRINT,
        "choices": [choice],
        "usage": _usage(request),
    }


def _usage(request: SimRequest) -> dict:
    return {
        "prompt_tokens": request.prompt_len,
        "completion_tokens": request.output,
        "total_tokens": request.prompt_len + request.output,
    }
