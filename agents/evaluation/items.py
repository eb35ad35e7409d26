"""The evaluation-set file: JSONL, one item a line, read into one shape (``EvaluationSet``)
that the agent runs and the site checks on upload (docs/quality.md).

    {"set": {"scorer": {"kind": "numeric"}, "max_tokens": 32}}          (optional, line 1)
    {"id": "q1", "prompt": "What is 17 + 25?", "reference": "42"}
    {"id": "q2", "messages": [{"role": "user", "content": "…"}], "reference": "Paris",
     "scorer": {"kind": "normalised"}}

Guarantees:

- ``parse_evaluation_set`` returns every item in file order, each with its scorer and
  ``max_tokens`` resolved (the item's own, else the set's), or raises
  ``EvaluationSetError`` naming the line (1 is the file's first) and the field
  (``scorer.tolerance``, ``messages[0].role``) — never another exception, whatever bytes it
  is given.
- Every item has a prompt or chat messages (not both), a unique ``id``, and what its scorer
  needs: a reference for exact, normalised, contains and numeric (a number for numeric); a
  pattern that compiles (regex); a schema that is a valid JSON Schema (json_schema); a rubric
  that shows the judge the output (judge).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

import jsonschema
import pydantic
from pydantic import Field

from agents.protocol import (
    MAX_OUTPUT_LEN,
    StrictModel,
    json_loads_bounded,
    pydantic_field_errors,
)
from agents.workloads import TraceError

# A set larger than this is a benchmark suite, not a check run beside every configuration.
MAX_EVALUATION_ITEMS = 10_000
# Most answers scored here are short; a set asks for more per item or per set.
DEFAULT_MAX_TOKENS = 256
MAX_PATTERN = 1_000
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


class EvaluationSetError(TraceError):
    """An evaluation set that cannot be used: ``line`` (1-based) and ``field`` say where,
    worded as the trace readers word theirs (``line 3: scorer.tolerance: …``)."""


def parse_number(text: str) -> float | None:
    """The number ``text`` is (thousands separators allowed: ``1,234.5``), or None."""
    text = text.strip()
    if not _NUMBER.fullmatch(text):
        return None
    return float(text.replace(",", ""))


class ExactScorer(StrictModel):
    """Passes when the output equals the reference, surrounding whitespace aside."""

    kind: Literal["exact"]


class NormalisedScorer(StrictModel):
    """Passes when output and reference are equal after normalising both (case, accents
    folded by NFKC, punctuation, the articles a/an/the and runs of whitespace)."""

    kind: Literal["normalised"]


class ContainsScorer(StrictModel):
    """Passes when the reference appears in the output."""

    kind: Literal["contains"]
    ignore_case: bool = False


class RegexScorer(StrictModel):
    """Passes when ``pattern`` (Python's ``re``) matches somewhere in the output."""

    kind: Literal["regex"]
    pattern: Annotated[str, Field(min_length=1, max_length=MAX_PATTERN)]
    ignore_case: bool = False

    @pydantic.field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str) -> str:
        try:
            re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as error:
            raise ValueError(f"not a regular expression ({error})") from None
        return pattern


class NumericScorer(StrictModel):
    """Passes when the last number in the output is within ``tolerance`` of the reference
    (or within ``relative_tolerance`` × |reference|, whichever is wider)."""

    kind: Literal["numeric"]
    tolerance: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    relative_tolerance: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


class JsonSchemaScorer(StrictModel):
    """Passes when the output is a JSON document (a Markdown code fence around it allowed)
    that validates against ``schema`` (JSON Schema, the draft its ``$schema`` names, else
    2020-12)."""

    kind: Literal["json_schema"]
    json_schema: dict = Field(alias="schema")

    @pydantic.field_validator("json_schema")
    @classmethod
    def _is_a_schema(cls, schema: dict) -> dict:
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as error:
            raise ValueError(f"not a valid JSON Schema ({error.message})") from None
        except Exception as error:  # an odd $schema or value the library cannot classify
            raise ValueError(f"not a valid JSON Schema ({type(error).__name__})") from None
        return schema


class JudgeScorer(StrictModel):
    """Scored by another model: ``rubric`` is sent to the judge with ``{prompt}``,
    ``{output}`` and ``{reference}`` filled in, and the judge's last ``SCORE: n`` line
    (0 ≤ n ≤ ``max_score``) gives the item n / ``max_score``."""

    kind: Literal["judge"]
    rubric: Annotated[str, Field(min_length=1, max_length=20_000)]
    max_score: Annotated[int, Field(ge=1, le=100)] = 1

    @pydantic.field_validator("rubric")
    @classmethod
    def _shows_the_output(cls, rubric: str) -> str:
        if "{output}" not in rubric:
            raise ValueError("must show the judge the answer: put {output} where it goes")
        return rubric


Scorer = Annotated[
    ExactScorer
    | NormalisedScorer
    | ContainsScorer
    | RegexScorer
    | NumericScorer
    | JsonSchemaScorer
    | JudgeScorer,
    Field(discriminator="kind"),
]
SCORER_KINDS = ("exact", "normalised", "contains", "regex", "numeric", "json_schema", "judge")
# What each scorer compares the output with: these cannot score an item without a reference.
_NEEDS_REFERENCE = frozenset({"exact", "normalised", "contains", "numeric"})

MaxTokens = Annotated[int, Field(ge=1, le=MAX_OUTPUT_LEN)]


class ChatMessage(StrictModel):
    role: Literal["system", "user", "assistant"]
    content: str


class SetDefaults(StrictModel):
    """The optional first line's ``set``: what items leave out, and words about the set."""

    scorer: Scorer | None = None
    max_tokens: MaxTokens | None = None
    description: Annotated[str, Field(max_length=2_000)] = ""
    licence: Annotated[str, Field(max_length=500)] = ""


class _SetLine(StrictModel):
    set: SetDefaults


class _ItemLine(StrictModel):
    id: Annotated[str, Field(min_length=1, max_length=200)] | int | None = None
    prompt: Annotated[str, Field(min_length=1)] | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1)] | None = None
    reference: str | int | float | None = None
    scorer: Scorer | None = None
    max_tokens: MaxTokens | None = None

    @pydantic.model_validator(mode="after")
    def _prompt_or_messages(self) -> _ItemLine:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give either 'prompt' or 'messages'")
        return self


@dataclass(frozen=True)
class EvaluationItem:
    """One item, its scorer and output length resolved; ``line`` is where the file has it."""

    id: str
    line: int
    prompt: str | None
    messages: tuple[dict, ...] | None
    reference: str | None
    scorer: (
        ExactScorer
        | NormalisedScorer
        | ContainsScorer
        | RegexScorer
        | NumericScorer
        | (JsonSchemaScorer | JudgeScorer)
    )
    max_tokens: int

    @property
    def prompt_text(self) -> str:
        """The prompt as one text (chat messages joined), for a judge's ``{prompt}``."""
        if self.prompt is not None:
            return self.prompt
        return "\n\n".join(f"{m['role']}: {m['content']}" for m in self.messages or ())


@dataclass(frozen=True)
class EvaluationSet:
    items: tuple[EvaluationItem, ...]
    description: str = ""
    licence: str = ""

    @property
    def needs_judge(self) -> bool:
        """Whether running the set needs a judge endpoint."""
        return any(item.scorer.kind == "judge" for item in self.items)

    def summary(self) -> dict:
        """What the site shows of a set: its size, its scorers and whether it needs a judge."""
        kinds: dict[str, int] = {}
        for item in self.items:
            kinds[item.scorer.kind] = kinds.get(item.scorer.kind, 0) + 1
        return {
            "items": len(self.items),
            "scorers": dict(sorted(kinds.items())),
            "needs_judge": self.needs_judge,
            "with_reference": sum(item.reference is not None for item in self.items),
        }


def _refusal(error: pydantic.ValidationError, line: int, model: type) -> EvaluationSetError:
    first = pydantic_field_errors(error, model=model)[0]
    return EvaluationSetError(first.message, line=line, field=first.field or None)


def _reference_text(value: str | int | float | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return repr(value) if isinstance(value, float) else str(value)


def _resolved(raw: _ItemLine, line: int, defaults: SetDefaults) -> EvaluationItem:
    scorer = raw.scorer or defaults.scorer
    if scorer is None:
        raise EvaluationSetError(
            "this item has no scorer, and the set names none", line=line, field="scorer"
        )
    reference = _reference_text(raw.reference)
    if scorer.kind in _NEEDS_REFERENCE and not reference:
        raise EvaluationSetError(
            f"the {scorer.kind} scorer needs a reference", line=line, field="reference"
        )
    if scorer.kind == "numeric" and parse_number(reference or "") is None:
        raise EvaluationSetError(
            f"the numeric scorer needs a number, got {reference!r}", line=line, field="reference"
        )
    messages = None if raw.messages is None else tuple(m.model_dump() for m in raw.messages)
    return EvaluationItem(
        id=str(raw.id) if raw.id is not None else f"line-{line}",
        line=line,
        prompt=raw.prompt,
        messages=messages,
        reference=reference,
        scorer=scorer,
        max_tokens=raw.max_tokens or defaults.max_tokens or DEFAULT_MAX_TOKENS,
    )


def parse_evaluation_set(data: bytes) -> EvaluationSet:
    """The evaluation set in ``data`` (a JSONL file's bytes, UTF-8); see the module docstring."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise EvaluationSetError("the file is not UTF-8 text", line=line) from None
    defaults, items, seen = SetDefaults(), [], {}
    set_line: int | None = None
    for number, content in enumerate(text.splitlines(), start=1):
        if not content.strip():
            continue
        try:
            value = json_loads_bounded(content)
        except (ValueError, RecursionError) as error:
            reason = error.args[0] if error.args else type(error).__name__
            raise EvaluationSetError(f"not JSON ({reason})", line=number) from None
        if not isinstance(value, dict):
            raise EvaluationSetError("each line is a JSON object", line=number)
        if "set" in value:
            if items or set_line is not None:
                raise EvaluationSetError(
                    "the set's defaults go on the first line", line=number, field="set"
                )
            try:
                defaults = _SetLine.model_validate(value).set
            except pydantic.ValidationError as error:
                raise _refusal(error, number, _SetLine) from None
            set_line = number
            continue
        try:
            raw = _ItemLine.model_validate(value)
        except pydantic.ValidationError as error:
            raise _refusal(error, number, _ItemLine) from None
        item = _resolved(raw, number, defaults)
        if item.id in seen:
            raise EvaluationSetError(
                f"{item.id!r} is already the id of line {seen[item.id]}", line=number, field="id"
            )
        seen[item.id] = number
        items.append(item)
        if len(items) > MAX_EVALUATION_ITEMS:
            raise EvaluationSetError(f"more than {MAX_EVALUATION_ITEMS:,} items", line=number)
    if not items:
        raise EvaluationSetError("no item")
    return EvaluationSet(tuple(items), defaults.description, defaults.licence)
