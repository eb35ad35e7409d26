"""The demo's quality lines (issue 38): scoring shown on two stand-in servers labelled as such,
with figures the product's own client, drift and floor rule compute from what they answered —
the same every time, and exactly what docs/answer.md shows at the end of ``make demo``.
(The demo's own run, whose configurations read "quality not judged: simulated", is checked
whole by ``tests/site/test_demo_serving.py``.)"""

from __future__ import annotations

import dataclasses
import io

from rich.console import Console

from agents.evaluation import paired_difference, wilson
from runs.demo.plans import SIM_DEMO, demo_experiment
from runs.demo.quality import print_stand_in_quality
from runs.models import AuditEvent
from tests.demo_process import demo_answer_in_docs


def printed(width: int = 100) -> list[str]:
    console = Console(file=io.StringIO(), width=width, record=True)
    print_stand_in_quality(console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def percent(value: float) -> str:
    return f"{value * 100:.1f}"


def test_the_stand_ins_are_labelled_and_scored_as_built():
    lines = printed()
    text = " ".join(" ".join(lines).split())
    assert "two STAND-INS — not a model, nothing measured" in text
    # A: 8 of 80 wrong; B: 16 of 80 wrong, A's 8 among them. Wilson's intervals, the 8
    # answers only B got wrong as its drift, and a paired interval on the difference.
    a, b = wilson(72, 80), wilson(64, 80)
    assert (
        f"stand-in A (built to get 8 of 80 wrong): score 90.0 % (95 % CI "
        f"{percent(a.low)}–{percent(a.high)} %) of 80 items" in text
    )
    changed = wilson(8, 80)
    difference = paired_difference([-1.0] * 8 + [0.0] * 72)
    assert (
        f"stand-in B (built to get 16 of 80 wrong): score 80.0 % (95 % CI "
        f"{percent(b.low)}–{percent(b.high)} %) of 80 items vs stand-in A: 8 of 80 "
        f"(10.0 %, {percent(changed.low)}–{percent(changed.high)} %) answers changed, "
        f"score -10.0 pts ({difference.low * 100:+.1f} to {difference.high * 100:+.1f})" in text
    )
    assert (
        "A quality floor of a score of at least 85.0 % keeps stand-in A and excludes stand-in B: "
        "score 80.0 % is below the floor of 85.0 %." in text
    )


def test_docs_answer_ends_with_exactly_what_the_demo_prints_of_the_stand_ins():
    lines = printed()
    docs = demo_answer_in_docs()
    assert docs[-len(lines) :] == lines


def test_a_demo_experiment_made_before_evaluations_is_given_the_pack(org_a):
    older = demo_experiment(org_a, dataclasses.replace(SIM_DEMO, evaluation={}), None)
    assert older.evaluation == {}
    again = demo_experiment(org_a, SIM_DEMO, None)
    assert again.id == older.id and again.evaluation["pack"] == "arithmetic"
    assert AuditEvent.objects.filter(organization=org_a, event="experiment.update").count() == 1
    # Given once: a later demo reuses it as it is.
    assert demo_experiment(org_a, SIM_DEMO, None).evaluation == again.evaluation
