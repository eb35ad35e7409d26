"""A trial's evaluation (issue 38, docs/quality.md): after its load levels, the job's
evaluation set is run against the same server (``agents.evaluation.client``), and what it
found goes out as ``evaluation`` messages.

Guarantees:

- ``trial_evaluation`` returns the fields of each ``EvaluationReport`` part (the caller adds
  the trial), or none: for a job without an evaluation, and for a simulated engine, which
  serves no text to score. It never raises for the set or the server: a set that cannot be
  read (an uploaded set the site does not serve, or whose sha256 is not the job's, included),
  or an evaluation that outlives ``timeout_s``, is logged and sends nothing; an item the
  server failed scores 0 and says why (the client's rule).
- Each item is reported by id with its score (None: unscored), its output cut to
  ``MAX_EVALUATION_OUTPUT_CHARS`` with the digest of the whole text, its latency and its
  error kind; the summary (score, 95 % interval, counts, seconds) rides in every part.
- The judge's key and the endpoint's key are used as bearer tokens only: no message holds
  them, and neither does a log line written here.
- An existing endpoint's requests go to the addresses the site checked for its host
  (``BENCHSITE_ENDPOINT_ADDRESSES``), the judge's to those it checked for the judge's
  (``BENCHSITE_JUDGE_ADDRESSES``), as the load generator's traffic does; none given: the
  name is looked up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from agents import protocol
from agents.evaluation import EvaluationSetError, parse_evaluation_set
from agents.evaluation.client import EvaluationOutcome, OpenAITarget, run_evaluation
from agents.evaluation.packs import BUILTIN_PACKS, load_pack

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EvaluationKeys:
    """The bearer tokens an evaluation may need: the served endpoint's (an existing endpoint)
    and the judge's. Secrets: never shown."""

    served: str | None = None
    judge: str | None = None

    def __repr__(self) -> str:
        return "EvaluationKeys(…)"


# An uploaded set's file by its id and sha256, checked (``agents.runner.session``).
FetchSet = Callable[[str, str], bytes]


async def _load_set(evaluation: protocol.EvaluationJob, fetch_set: FetchSet | None):
    if evaluation.pack is not None:
        if evaluation.pack not in BUILTIN_PACKS:
            raise EvaluationSetError(f"no built-in pack {evaluation.pack!r} in this agent")
        return load_pack(evaluation.pack)
    if not evaluation.fetched:
        return parse_evaluation_set((evaluation.set_jsonl or "").encode())
    if fetch_set is None:
        raise EvaluationSetError(f"set {evaluation.set_id}: this agent has no site to fetch it")
    # A download: off the event loop, which the engine's watchers share.
    raw = await asyncio.to_thread(fetch_set, evaluation.set_id, evaluation.set_sha256)
    return parse_evaluation_set(raw)


def item_result(outcome) -> protocol.EvaluationItemResult:
    """One ``ItemOutcome`` as the wire carries it (module docstring)."""
    output = outcome.output
    return protocol.EvaluationItemResult(
        id=outcome.item_id,
        score=None if outcome.score is None else min(max(outcome.score, 0.0), 1.0),
        output=None if output is None else output[: protocol.MAX_EVALUATION_OUTPUT_CHARS],
        output_sha256=None if output is None else protocol.evaluation_digest(output),
        latency_s=None if outcome.latency_s is None else max(outcome.latency_s, 0.0),
        error=None if outcome.error is None else outcome.error[:100],
    )


def evaluation_parts(outcome: EvaluationOutcome, seconds: float) -> list[dict]:
    """The fields of each ``EvaluationReport`` part for ``outcome`` (without the trial)."""
    score = outcome.score
    summary = protocol.EvaluationSummary(
        score=None if score is None else score.value,
        low=None if score is None else score.low,
        high=None if score is None else score.high,
        items=len(outcome.outcomes),
        scored=0 if score is None else score.n,
        failed=outcome.failed,
        unscored=outcome.unscored,
        seconds=max(seconds, 0.0),
    )
    results = [item_result(item) for item in outcome.outcomes]
    size = protocol.MAX_EVALUATION_PART_ITEMS
    chunks = [results[start : start + size] for start in range(0, len(results), size)] or [[]]
    return [
        {"part": part, "parts": len(chunks), "items": chunk, "summary": summary}
        for part, chunk in enumerate(chunks)
    ]


async def trial_evaluation(
    job: protocol.JobSpec,
    *,
    base_url: str,
    keys: EvaluationKeys,
    timeout_s: float,
    fetch_set: FetchSet | None = None,
    served_addresses: tuple[str, ...] = (),
    judge_addresses: tuple[str, ...] = (),
) -> list[dict]:
    """Runs the job's evaluation against the server at ``base_url`` (module docstring);
    ``fetch_set`` gives an uploaded set's file the job names by id; the addresses pin the
    served endpoint's and the judge's requests."""
    evaluation = job.evaluation
    if evaluation is None or job.engine.kind == "sim":
        return []
    try:
        evaluation_set = await _load_set(evaluation, fetch_set)
    except EvaluationSetError as error:
        logger.error("the job's evaluation set cannot be read: %s", error)
        return []
    judge = None
    if evaluation.judge is not None:
        judge = OpenAITarget(
            evaluation.judge.base_url, evaluation.judge.model, keys.judge, judge_addresses
        )
    target = OpenAITarget(base_url, job.model.served_model_name, keys.served, served_addresses)
    start = time.monotonic()
    try:
        outcome = await asyncio.wait_for(
            run_evaluation(
                evaluation_set,
                target,
                judge=judge,
                seed=evaluation.seed,
                concurrency=evaluation.concurrency,
            ),
            timeout=max(timeout_s, 1.0),
        )
    except TimeoutError:
        logger.warning("the evaluation ran past %.0f s and was abandoned", timeout_s)
        return []
    except ValueError as error:  # a set with judge items and no judge in the job
        logger.error("the evaluation cannot run: %s", error)
        return []
    return evaluation_parts(outcome, time.monotonic() - start)
