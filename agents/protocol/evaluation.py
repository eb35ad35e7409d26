"""Quality beside speed on the wire (issue 38, docs/quality.md): what a job asks the agent to
score each configuration on (``EvaluationJob``), and what it reports back per trial
(``EvaluationItemResult``, carried by ``messages.EvaluationReport``).

Guarantees:

- A job's evaluation is one of: an uploaded set named by id and digest (``set_id``,
  ``set_sha256``), which the agent fetches from the site by route
  (``AGENT_EVALUATION_SET_ROUTE``) and uses only when its sha256 matches; a set's file
  carried whole (``set_jsonl``, at most ``MAX_JOB_EVALUATION_BYTES``: a job written by
  hand); or a built-in pack's name. The agent parses a set with the site's own parser. A
  judge is named by its URL and model only: its key travels apart from the job
  (``BENCHSITE_JUDGE_API_KEY``), like an endpoint's.
- An item's result is bounded whatever the model answered: its output is cut to
  ``MAX_EVALUATION_OUTPUT_CHARS`` and identified whole by ``output_sha256`` (of the text,
  surrounding whitespace aside: what drift compares); a report holds at most
  ``MAX_EVALUATION_PART_ITEMS`` items, so a large set goes in parts and no message nears
  the REST batch's byte limit.
"""

from __future__ import annotations

import hashlib
from typing import Annotated

import pydantic
from pydantic import Field

from agents.protocol.strict import StrictModel
from agents.protocol.workload import MAX_SEED

# The job travels in the pod's environment (base64 JSON), and Linux allows one variable 128
# KiB: a file carried in the job stays this small to leave room for the rest of it. The site
# sends an uploaded set by id instead, whatever its size (fetched by route).
MAX_JOB_EVALUATION_BYTES = 64 * 1024
MAX_EVALUATION_CONCURRENCY = 32
# Enough of an answer to read it on the run page; the digest stands for the whole of it.
MAX_EVALUATION_OUTPUT_CHARS = 1_000
# 250 items of 1,000 characters (6 bytes each at worst, escaped) stay under 2 MB a message.
MAX_EVALUATION_PART_ITEMS = 250
MAX_EVALUATION_PARTS = 40  # 10,000 items, the most a set holds

_Score = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]


class EvaluationJudge(StrictModel):
    """The endpoint that scores judge items: its API base (before ``/v1``) and the model it
    serves; ``endpoint_id`` names the site's row its key comes from."""

    base_url: str = Field(max_length=500, pattern=r"^https?://")
    model: str = Field(max_length=200)
    endpoint_id: str = Field(max_length=64)


class EvaluationJob(StrictModel):
    """What every configuration of the run is scored on, after its load levels, on the same
    server: an uploaded set fetched from the site (``set_id`` and ``set_sha256``), a set's
    file carried whole (``set_jsonl``; its id and digest, when given, are for the record) or
    a built-in ``pack``; the judge for judge items; requests in flight and the seed."""

    set_jsonl: str | None = Field(
        default=None, max_length=MAX_JOB_EVALUATION_BYTES, exclude_if=lambda v: v is None
    )
    # Part of a route and of a file name in the agent's work folder: no "/" or "..".
    set_id: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9_-]{1,64}$", exclude_if=lambda v: v is None
    )
    set_sha256: str | None = Field(
        default=None, pattern=r"^[0-9a-f]{64}$", exclude_if=lambda v: v is None
    )
    pack: str | None = Field(
        default=None, pattern=r"^[a-z][a-z0-9_]{0,39}$", exclude_if=lambda v: v is None
    )
    judge: EvaluationJudge | None = Field(default=None, exclude_if=lambda v: v is None)
    concurrency: Annotated[int, Field(ge=1, le=MAX_EVALUATION_CONCURRENCY)] = 4
    seed: int = Field(default=0, ge=0, le=MAX_SEED)

    @pydantic.model_validator(mode="after")
    def _one_source(self) -> EvaluationJob:
        named_set = self.set_jsonl is not None or self.set_id is not None
        if named_set == (self.pack is not None):
            raise ValueError("give a set (set_id, or set_jsonl) or a pack, one of them")
        if self.set_jsonl is None and self.set_id is not None and self.set_sha256 is None:
            raise ValueError("a set fetched from the site (set_id) needs its set_sha256")
        return self

    @property
    def fetched(self) -> bool:
        """Whether the agent fetches the set from the site (it is not in the job)."""
        return self.set_jsonl is None and self.set_id is not None


class EvaluationItemResult(StrictModel):
    """One item on one configuration: its score (None: unscored, its judge failed), the
    output cut to ``MAX_EVALUATION_OUTPUT_CHARS`` and the digest of all of it (both None:
    the served model gave no answer, ``error`` says why), and the request's seconds."""

    id: str = Field(min_length=1, max_length=200)
    score: _Score | None = None
    output: str | None = Field(default=None, max_length=MAX_EVALUATION_OUTPUT_CHARS)
    output_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    latency_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    error: str | None = Field(default=None, max_length=100)


class EvaluationSummary(StrictModel):
    """The trial's score over its scored items with the 95 % Wilson interval (all None when
    nothing was scored), and its counts: items, scored, failed (no answer, scored 0) and
    unscored; ``seconds``: the evaluation's wall time."""

    score: _Score | None = None
    low: _Score | None = None
    high: _Score | None = None
    items: Annotated[int, Field(ge=0, le=10_000)]
    scored: Annotated[int, Field(ge=0, le=10_000)]
    failed: Annotated[int, Field(ge=0, le=10_000)] = 0
    unscored: Annotated[int, Field(ge=0, le=10_000)] = 0
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0

    @pydantic.model_validator(mode="after")
    def _interval_holds_score(self) -> EvaluationSummary:
        values = (self.score, self.low, self.high)
        if any(v is None for v in values) != all(v is None for v in values):
            raise ValueError("give score, low and high together, or none of them")
        if self.score is not None and not self.low <= self.score <= self.high:
            raise ValueError("low <= score <= high")
        if self.scored > self.items:
            raise ValueError("scored cannot exceed items")
        return self


def evaluation_digest(output: str) -> str:
    """The digest an item's output is compared by: sha256 of the text, surrounding
    whitespace aside (as ``agents.evaluation.drift`` compares answers)."""
    return hashlib.sha256(output.strip().encode()).hexdigest()
