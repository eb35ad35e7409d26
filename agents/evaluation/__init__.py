"""Quality beside speed: evaluation sets (``items``), their scorers (``scorers``), a score's
interval (``intervals``), drift between two configurations' answers (``drift``) and the
built-in packs (``packs``). All pure: the site checks uploads with it. Running a set against a
server is ``agents.evaluation.client`` (HTTP), imported on its own."""

from agents.evaluation.drift import Answer, Drift, drift
from agents.evaluation.intervals import Interval, paired_difference, score_interval, wilson
from agents.evaluation.items import (
    SCORER_KINDS,
    EvaluationItem,
    EvaluationSet,
    EvaluationSetError,
    parse_evaluation_set,
)
from agents.evaluation.scorers import Verdict, judge_prompt, judge_verdict, score_output

__all__ = [
    "SCORER_KINDS",
    "Answer",
    "Drift",
    "EvaluationItem",
    "EvaluationSet",
    "EvaluationSetError",
    "Interval",
    "Verdict",
    "drift",
    "judge_prompt",
    "judge_verdict",
    "paired_difference",
    "parse_evaluation_set",
    "score_interval",
    "score_output",
    "wilson",
]
