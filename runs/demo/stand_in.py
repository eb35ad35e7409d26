"""An OpenAI-compatible stand-in on 127.0.0.1 that answers with known text: a served model
that is right on chosen items of an evaluation set, or a judge. It is no model and measures
nothing: the demo shows quality scoring on it, labelled as a stand-in (``runs.demo.quality``),
and the evaluation tests score against it.

``StandInServer(answer)`` serves ``POST /v1/chat/completions`` and ``POST /v1/completions``
without streaming, as vLLM answers them (``choices[0].message.content`` or
``choices[0].text``, and ``usage``). ``answer(prompt)`` gives the reply text for the request's
prompt (a chat request's last message); returning None answers 500. Every request body is
kept in ``requests`` and its Host header in ``hosts``, so a test can check what a client sent
(temperature, seed, lengths, the name it asked for);
``peak_in_flight`` is the most requests it was answering at once (each held ``delay_s``).
``right_except(evaluation_set, wrong)`` is an ``answer`` that replies each item's reference,
but a wrong number on the items named: a known share right, by construction.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agents.evaluation import EvaluationSet
from runs.demo.local_http import send_json, serve_in_thread, server_url, stop_serving


def right_except(evaluation_set: EvaluationSet, wrong: set[str]) -> Callable[[str], str]:
    """Replies with the reference of the item whose prompt was asked, or, for the items whose
    ids are in ``wrong``, the reference plus one (whole-number references: a numeric scorer's
    miss). Prompts must be unique in the set and every wrong item's reference a whole number."""
    references = {item.prompt: (item.id, item.reference) for item in evaluation_set.items}
    if len(references) != len(evaluation_set.items):
        raise ValueError("right_except needs one item per prompt")

    def answer(prompt: str) -> str:
        item_id, reference = references[prompt]
        return f"{int(reference) + 1}" if item_id in wrong else str(reference)

    return answer


@dataclass
class StandInServer:
    """The stand-in (module docstring): ``start`` (or ``with``) serves it, ``stop`` ends it."""

    answer: Callable[[str], str | None]
    delay_s: float = 0.0
    requests: list[dict] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    peak_in_flight: int = 0
    _in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return server_url(self._server)

    def start(self) -> StandInServer:
        stand_in = self

        class Handler(_AnswerHandler):
            owner = stand_in

        self._server = serve_in_thread(Handler)
        return self

    def stop(self) -> None:
        stop_serving(self._server)

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _reply(self, path: str, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append(body)
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            chat = path == "/v1/chat/completions"
            prompt = body["messages"][-1]["content"] if chat else body["prompt"]
            text = self.answer(prompt)
        finally:
            with self._lock:
                self._in_flight -= 1
        if text is None:
            return 500, {"error": {"message": "the stand-in was told to fail", "code": 500}}
        choice = {"index": 0, "finish_reason": "stop"}
        choice |= {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
        usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": len(text.split())}
        kind = "chat.completion" if chat else "text_completion"
        return 200, {
            "id": "cmpl-stand-in",
            "object": kind,
            "model": body.get("model"),
            "choices": [choice],
            "usage": usage,
        }


class _AnswerHandler(BaseHTTPRequestHandler):
    owner: StandInServer
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without this, Nagle's algorithm holds the body
    # back for the client's delayed ACK (about 40 ms a request on Linux).
    disable_nagle_algorithm = True

    def log_message(self, format, *args):  # keep the demo's and the tests' output clean
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length))
        if self.path in ("/v1/chat/completions", "/v1/completions"):
            with self.owner._lock:
                self.owner.hosts.append(self.headers.get("Host", ""))
            status, reply = self.owner._reply(self.path, body)
        else:
            status, reply = 404, {"error": {"message": f"no route {self.path}"}}
        send_json(self, status, reply)
