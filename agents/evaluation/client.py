"""Running an evaluation set against an OpenAI-compatible server: every item sent greedy
(temperature 0) with a fixed seed, a few at a time, its output scored, judge items through a
second endpoint.

Guarantees:

- ``run_evaluation`` returns one ``ItemOutcome`` per item, in the set's order, and never
  raises for a failed request: an item the served model did not answer (an HTTP error, a
  timeout, a reply without text) scores 0 and carries ``error``, since the served
  configuration gave no answer; an item whose judge failed or gave no usable score is left
  unscored (``score`` None), since the served configuration is not at fault.
- ``score`` is the mean over the scored items with its 95 % interval
  (``agents.evaluation.intervals.score_interval``); None when nothing was scored.
- At most ``concurrency`` items are in flight at once (the judge's calls included), so the
  evaluation loads the server modestly whatever the set's size.
- A target with ``addresses`` (what the site resolved its host to and checked) is reached at
  those addresses only, in turn when one cannot be connected to, never at what its name
  answers now, and through no proxy of the environment; the Host header and the TLS server
  name stay the host's, so certificates are verified against the name.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from time import perf_counter
from typing import Literal

import httpx

from agents.evaluation.drift import Answer
from agents.evaluation.intervals import Interval, score_interval
from agents.evaluation.items import EvaluationItem, EvaluationSet
from agents.evaluation.scorers import Verdict, judge_prompt, judge_verdict, score_output

DEFAULT_CONCURRENCY = 4
DEFAULT_SEED = 0
JUDGE_MAX_TOKENS = 512
# Kept of an error body or a judge's reply: enough to say what went wrong.
_MAX_KEPT = 2_000


@dataclass(frozen=True)
class OpenAITarget:
    """An OpenAI-compatible server: its base URL (``http://host:port``, no ``/v1``), the
    model name it serves, its key if it asks for one, and the addresses to reach it at
    (empty: look the name up)."""

    base_url: str
    model: str
    api_key: str | None = None
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class ItemOutcome:
    """One item's result: the served model's output, its score (None: unscored), the
    request's latency in seconds, and why it failed where it did."""

    item_id: str
    output: str | None
    score: float | None
    latency_s: float | None
    error: str | None = None
    detail: str = ""
    judge_reply: str | None = None


@dataclass(frozen=True)
class EvaluationOutcome:
    """Every item's outcome in the set's order, and the set's score over the scored ones."""

    outcomes: tuple[ItemOutcome, ...]
    score: Interval | None

    @property
    def failed(self) -> int:
        """Items the served model gave no answer to (scored 0)."""
        return sum(outcome.output is None for outcome in self.outcomes)

    @property
    def unscored(self) -> int:
        """Items answered but not scored (their judge failed)."""
        return sum(outcome.score is None for outcome in self.outcomes)

    def answers(self) -> dict[str, Answer]:
        """The answered items as ``drift`` compares them, keyed by item id."""
        return {
            outcome.item_id: Answer(outcome.output, outcome.score)
            for outcome in self.outcomes
            if outcome.output is not None
        }


class _Refused(Exception):
    """A request that got no usable reply; ``kind`` names why."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(kind)
        self.kind, self.detail = kind, detail[:_MAX_KEPT]


async def _post(
    client: httpx.AsyncClient, target: OpenAITarget, path: str, *, body: dict, headers: dict
) -> httpx.Response:
    """The target's answer to ``body`` at ``path``, at its addresses when it has them (module
    docstring); raises ``_Refused`` for a timeout or a transport error."""
    url = httpx.URL(target.base_url.rstrip("/") + path)
    routes: list[tuple[httpx.URL, dict, dict]] = [(url, {}, {})]
    if target.addresses:
        # httpx would take both from the URL, which names an address now: keep the host's.
        pinned = {"Host": url.netloc.decode("ascii")}
        extensions = {"sni_hostname": url.raw_host.decode("ascii")}
        routes = [(url.copy_with(host=ip), pinned, extensions) for ip in target.addresses]
    failure = _Refused("transport")
    for address, pinned_headers, extensions in routes:
        try:
            return await client.post(
                address, json=body, headers=headers | pinned_headers, extensions=extensions
            )
        except httpx.ConnectError as error:  # nothing was sent: the next address may answer
            failure = _Refused("transport", type(error).__name__)
        except httpx.TimeoutException:
            raise _Refused("timeout") from None
        except httpx.HTTPError as error:
            raise _Refused("transport", type(error).__name__) from None
    raise failure


async def _complete(
    client: httpx.AsyncClient,
    target: OpenAITarget,
    *,
    endpoint: Literal["chat", "completions"],
    prompt: str | None,
    messages: list[dict] | None,
    max_tokens: int,
    seed: int,
) -> str:
    """The text the target answers, greedy and seeded; raises ``_Refused``."""
    body: dict = {"model": target.model, "temperature": 0.0, "seed": seed, "stream": False}
    if endpoint == "chat":
        body["messages"] = messages or [{"role": "user", "content": prompt}]
        body["max_completion_tokens"] = max_tokens
        path = "/v1/chat/completions"
    else:
        body["prompt"] = prompt
        body["max_tokens"] = max_tokens
        path = "/v1/completions"
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    response = await _post(client, target, path, body=body, headers=headers)
    if response.status_code != 200:
        raise _Refused(f"http_{response.status_code}", response.text)
    try:
        choice = response.json()["choices"][0]
        text = choice["message"]["content"] if endpoint == "chat" else choice["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise _Refused("malformed_response", response.text) from None
    if not isinstance(text, str):
        raise _Refused("no_text", response.text)
    return text


async def _run_item(
    item: EvaluationItem,
    client: httpx.AsyncClient,
    target: OpenAITarget,
    judge: OpenAITarget | None,
    *,
    endpoint: Literal["chat", "completions"],
    seed: int,
    slots: asyncio.Semaphore,
) -> ItemOutcome:
    # A chat item always goes to the chat endpoint: only the server can apply its template.
    item_endpoint = "chat" if item.messages is not None else endpoint
    async with slots:
        start = perf_counter()
        try:
            output = await _complete(
                client,
                target,
                endpoint=item_endpoint,
                prompt=item.prompt,
                messages=list(item.messages) if item.messages else None,
                max_tokens=item.max_tokens,
                seed=seed,
            )
        except _Refused as refused:
            return ItemOutcome(
                item.id, None, 0.0, perf_counter() - start, refused.kind, refused.detail
            )
        latency = perf_counter() - start
    if item.scorer.kind != "judge":
        verdict = score_output(item, output)
        return ItemOutcome(item.id, output, verdict.score, latency, None, verdict.detail)
    assert judge is not None  # run_evaluation refuses a judge set without one
    async with slots:
        try:
            reply = await _complete(
                client,
                judge,
                endpoint="chat",
                prompt=judge_prompt(item, output),
                messages=None,
                max_tokens=JUDGE_MAX_TOKENS,
                seed=seed,
            )
        except _Refused as refused:
            verdict = Verdict(None, f"the judge failed: {refused.kind}")
            return ItemOutcome(
                item.id, output, None, latency, f"judge_{refused.kind}", verdict.detail
            )
    verdict = judge_verdict(item, reply)
    return ItemOutcome(
        item.id, output, verdict.score, latency, None, verdict.detail, reply[:_MAX_KEPT]
    )


async def run_evaluation(
    evaluation_set: EvaluationSet,
    target: OpenAITarget,
    *,
    judge: OpenAITarget | None = None,
    endpoint: Literal["chat", "completions"] = "chat",
    seed: int = DEFAULT_SEED,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout_s: float = 300.0,
) -> EvaluationOutcome:
    """Runs every item of ``evaluation_set`` against ``target`` (module docstring); a set
    with judge items needs ``judge``. ``endpoint`` is where prompt items go (chat items
    always go to the chat endpoint)."""
    if evaluation_set.needs_judge and judge is None:
        raise ValueError("the set has items scored by a judge: give a judge endpoint")
    if concurrency < 1:
        raise ValueError(f"concurrency must be at least 1, got {concurrency}")
    slots = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    # A pinned target's requests go where the site checked: no proxy of the environment.
    pinned = bool(target.addresses or (judge is not None and judge.addresses))
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits, trust_env=not pinned) as client:
        outcomes = await asyncio.gather(
            *(
                _run_item(item, client, target, judge, endpoint=endpoint, seed=seed, slots=slots)
                for item in evaluation_set.items
            )
        )
    scores = [outcome.score for outcome in outcomes if outcome.score is not None]
    return EvaluationOutcome(tuple(outcomes), score_interval(scores) if scores else None)
