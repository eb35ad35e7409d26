"""Scoring one output against its item: every scorer gives a score from 0 to 1 and says why.

Guarantees:

- ``score_output`` scores any item whose scorer is not ``judge`` from the output alone, and
  never raises for an output, whatever text it is: an output a scorer cannot read (not JSON,
  no number in it) scores 0 and says so.
- A judge item is scored in two steps: ``judge_prompt`` is what the judge is sent, and
  ``judge_verdict`` reads its reply; a reply with no usable ``SCORE: n`` line leaves the item
  unscored (``score`` None), since the served configuration is not at fault.
- Pass/fail scorers give exactly 0 or 1; only a judge with ``max_score`` above 1 gives
  partial scores.
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from dataclasses import dataclass

import jsonschema
import referencing.exceptions

from agents.evaluation.items import EvaluationItem, parse_number
from agents.protocol import json_loads_bounded

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_NUMBER_IN_TEXT = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)
_JUDGE_SCORE = re.compile(r"score\s*[:=]\s*\**\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """One item's score from 0 to 1 (None: not scored) and a short reason."""

    score: float | None
    detail: str = ""


def normalise(text: str) -> str:
    """``text`` as the normalised scorer compares it: NFKC, lower case, punctuation and the
    articles a/an/the removed, whitespace collapsed (SQuAD's answer normalisation)."""
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (``1,234.5`` is one number), or None."""
    found = _NUMBER_IN_TEXT.findall(text)
    return parse_number(found[-1]) if found else None


def _passes(passed: bool, detail: str) -> Verdict:
    return Verdict(1.0 if passed else 0.0, detail)


def _json_document(output: str) -> object:
    fenced = _FENCE.match(output)
    return json_loads_bounded(fenced.group(1) if fenced else output.strip())


def score_output(item: EvaluationItem, output: str) -> Verdict:
    """``output`` scored by ``item``'s scorer (not ``judge``: see ``judge_verdict``)."""
    scorer, reference = item.scorer, item.reference or ""
    if scorer.kind == "exact":
        return _passes(output.strip() == reference.strip(), "exact match")
    if scorer.kind == "normalised":
        return _passes(normalise(output) == normalise(reference), "normalised match")
    if scorer.kind == "contains":
        if scorer.ignore_case:
            return _passes(reference.casefold() in output.casefold(), "contains (any case)")
        return _passes(reference in output, "contains")
    if scorer.kind == "regex":
        flags = re.IGNORECASE if scorer.ignore_case else 0
        return _passes(re.search(scorer.pattern, output, flags) is not None, "pattern matched")
    if scorer.kind == "numeric":
        return _numeric(output, reference, scorer.tolerance, scorer.relative_tolerance)
    if scorer.kind == "json_schema":
        return _json_schema(output, scorer.json_schema)
    raise ValueError(f"item {item.id!r} is scored by a judge: use judge_prompt/judge_verdict")


def _numeric(output: str, reference: str, tolerance: float, relative: float) -> Verdict:
    got, expected = last_number(output), parse_number(reference)
    if got is None or expected is None:
        return Verdict(0.0, "no number in the output")
    allowed = max(tolerance, relative * abs(expected))
    if not math.isfinite(got):
        return Verdict(0.0, "the number is not finite")
    return _passes(abs(got - expected) <= allowed, f"{got:g} against {expected:g} ± {allowed:g}")


def _json_schema(output: str, schema: dict) -> Verdict:
    try:
        document = _json_document(output)
    except (ValueError, RecursionError):
        return Verdict(0.0, "not JSON")
    try:
        jsonschema.validators.validator_for(schema)(schema).validate(document)
    except jsonschema.ValidationError as error:
        return Verdict(0.0, f"does not match the schema: {error.message[:200]}")
    except referencing.exceptions.Unresolvable as error:
        # A $ref to anything outside the schema: nothing is fetched from the network.
        return Verdict(0.0, f"the schema's reference cannot be resolved ({error})"[:240])
    return Verdict(1.0, "matches the schema")


def judge_prompt(item: EvaluationItem, output: str) -> str:
    """What the judge is sent for ``item``'s ``output``: its rubric with ``{prompt}``,
    ``{output}`` and ``{reference}`` filled in (other braces are left as written), then the
    line it must answer with."""
    assert item.scorer.kind == "judge"
    filled = (
        item.scorer.rubric.replace("{prompt}", item.prompt_text)
        .replace("{reference}", item.reference or "")
        .replace("{output}", output)
    )
    return (
        f"{filled}\n\nEnd your reply with one line 'SCORE: n', "
        f"n a whole number from 0 to {item.scorer.max_score}."
    )


def judge_verdict(item: EvaluationItem, reply: str) -> Verdict:
    """The item's score from the judge's ``reply``: its last ``SCORE: n`` over
    ``max_score``; unscored when there is none or n is out of range."""
    assert item.scorer.kind == "judge"
    found = _JUDGE_SCORE.findall(reply)
    if not found:
        return Verdict(None, "the judge's reply has no 'SCORE: n' line")
    value = float(found[-1])
    if not 0 <= value <= item.scorer.max_score:
        return Verdict(None, f"the judge scored {value:g}, outside 0 to {item.scorer.max_score}")
    return Verdict(value / item.scorer.max_score, f"judge: {value:g} of {item.scorer.max_score}")
