"""Label-free drift: how one configuration's answers on an evaluation set differ from the
reference configuration's (vLLM's defaults, or the BF16 trial) on the same items.

Guarantees: ``drift`` compares only items both configurations answered (an item either failed
is counted apart, in ``missing``); an answer changed when its text differs, surrounding
whitespace aside; where both were scored, ``score_difference`` is the candidate's mean score
minus the reference's over those items, with a paired interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agents.evaluation.intervals import Interval, paired_difference, wilson


@dataclass(frozen=True)
class Answer:
    """One configuration's answer to one item: its text and, where scored, its score."""

    output: str
    score: float | None = None


@dataclass(frozen=True)
class Drift:
    """The share of answers that changed (with its Wilson interval), which items changed,
    how many could not be compared, and the scored difference (None without scores)."""

    compared: int
    changed: tuple[str, ...]
    changed_share: Interval | None
    missing: int
    score_difference: Interval | None


def drift(reference: Mapping[str, Answer], candidate: Mapping[str, Answer]) -> Drift:
    """``candidate``'s answers against ``reference``'s, both keyed by item id."""
    common = [key for key in reference if key in candidate]
    missing = len(reference.keys() | candidate.keys()) - len(common)
    changed = tuple(
        key for key in common if reference[key].output.strip() != candidate[key].output.strip()
    )
    differences = [
        candidate[key].score - reference[key].score
        for key in common
        if reference[key].score is not None and candidate[key].score is not None
    ]
    return Drift(
        compared=len(common),
        changed=changed,
        changed_share=wilson(len(changed), len(common)) if common else None,
        missing=missing,
        score_difference=paired_difference(differences) if differences else None,
    )
