"""The demo's quality lines (issue 38, docs/quality.md): how each configuration of the demo's
run stands on its evaluation, then quality scoring shown on two stand-in servers.

Guarantees:

- ``print_run_quality`` prints, for a run whose job has an evaluation, one line per
  configuration of its answer (``runs.selectors.run_answer``) in the site's words: its
  score with the 95 % interval and its drift from the reference configuration, or why it
  has none — every configuration of a simulated run reads ``quality not judged:
  simulated`` (the simulator serves no text). A run without an evaluation prints nothing.
- ``print_stand_in_quality`` says first, in capitals, that what follows is no model and
  measures nothing: two ``runs.demo.stand_in`` servers on 127.0.0.1 answer the arithmetic
  pack right except on items chosen here (8 and 16 of 80). Every figure it prints is
  computed from what they answered by the product's own code — the agent's evaluation
  client, ``drift`` and the quality floor's rule — so it shows the feature, and the lines
  are the same every time (the stand-ins' answers are fixed; latency is not printed).
"""

from __future__ import annotations

import asyncio

from rich.console import Console

from agents.evaluation.client import EvaluationOutcome, OpenAITarget, run_evaluation
from agents.evaluation.packs import load_pack
from runs.answer_text import quality_state
from runs.demo.answer import config_name
from runs.demo.plans import DemoPlan
from runs.demo.stand_in import StandInServer, right_except
from runs.models import Run
from runs.selectors.run_answer import run_answer
from runs.selectors.trial_quality import (
    TrialQuality,
    drift_json,
    quality_floor_exclusions,
    quality_floor_text,
    unjudged_note,
)

STAND_IN_PACK = "arithmetic"
# Each stand-in's wrong items, by position in the pack: every 10th (8 of 80), every 5th (16).
STAND_IN_WRONG_EVERY = {"A": 10, "B": 5}
# The floor the stand-ins are held to: between their scores by construction (90 % and 80 %).
STAND_IN_FLOOR = {"min_score": 0.85}


def quality_words(state: dict, reference: str) -> tuple[str, str | None]:
    """A configuration's quality (``quality_state``) in words: its score (``score 90.0 %
    (95 % CI 81.6–94.8 %) of 80 items``) or why it has none (``quality not judged:
    simulated``), and its drift from ``reference`` (None without one), in the run page's
    figures."""
    if state.get("score") is None:
        return unjudged_note(state), None
    score = (
        f"score {state['score_text']} (95 % CI {state['interval_text']}) of {state['items']} items"
    )
    found = state.get("drift")
    if found is None:
        return score, None
    moved = f"vs {reference}: {found['changed_text']} answers changed"
    if found["difference_text"]:
        moved += f", score {found['difference_text']}"
    return score, moved


def _set_words(evaluation: dict) -> str:
    if evaluation.get("pack"):
        pack = load_pack(evaluation["pack"])
        return f"the {evaluation['pack']} pack ({len(pack.items)} items)"
    return "its evaluation set"


def print_run_quality(run: Run, plan: DemoPlan, console: Console) -> None:
    """Each configuration's quality on the run's evaluation (module docstring)."""
    evaluation = run.job_spec.get("evaluation")
    if not evaluation:
        return
    answer = run_answer(run=run)
    names = {config.trial: config_name(config, plan) for config in answer.configs}
    why = " — the simulator serves no text to score" if answer.simulated else ""
    console.print(f"Quality on {_set_words(evaluation)}{why}:")
    for config in answer.configs:
        state = quality_state(config.quality) or {}
        reference = (state.get("drift") or {}).get("reference_trial")
        score, moved = quality_words(state, names.get(reference, "the reference"))
        console.print(f"  {names[config.trial]}: {score}" + (f"; {moved}" if moved else ""))


def _stand_in_scores() -> dict[str, tuple[int, EvaluationOutcome]]:
    """Each stand-in's count of wrong items and its outcome on the pack, asked as a run asks
    a served model."""
    pack = load_pack(STAND_IN_PACK)
    outcomes = {}
    for name, every in STAND_IN_WRONG_EVERY.items():
        wrong = {item.id for item in pack.items[::every]}
        with StandInServer(right_except(pack, wrong)) as server:
            target = OpenAITarget(server.url, f"stand-in-{name.lower()}")
            outcomes[name] = (len(wrong), asyncio.run(run_evaluation(pack, target)))
    return outcomes


def print_stand_in_quality(console: Console) -> None:
    """Quality scoring shown on two stand-ins, labelled as such (module docstring)."""
    found = _stand_in_scores()
    outcomes = {name: outcome for name, (_wrong, outcome) in found.items()}
    console.print(
        f"\nQuality beside speed, shown on two STAND-INS — not a model, nothing measured: "
        f"OpenAI-compatible servers on 127.0.0.1 that answer the {STAND_IN_PACK} pack right "
        "except on the items they were built to get wrong, scored by the same client, drift "
        "and floor rules as a run's configurations."
    )
    names = list(outcomes)
    first = outcomes[names[0]]
    for index, (name, outcome) in enumerate(outcomes.items()):
        quality = TrialQuality(
            trial=index,
            score=outcome.score.value,
            low=outcome.score.low,
            high=outcome.score.high,
            scored=outcome.score.n,
            items=len(outcome.outcomes),
            failed=outcome.failed,
            drift=drift_json(first.answers(), outcome.answers(), 0) if index else None,
        )
        built = f"built to get {found[name][0]} of {len(outcome.outcomes)} wrong"
        score, moved = quality_words(quality_state(quality.as_json()), f"stand-in {names[0]}")
        console.print(f"  stand-in {name} ({built}): {score}")
        if moved:
            console.print(f"    {moved}")
    scores = {index: outcomes[name].score.value for index, name in enumerate(names)}
    excluded = quality_floor_exclusions(STAND_IN_FLOOR, scores)
    kept = [f"stand-in {name}" for index, name in enumerate(names) if index not in excluded]
    console.print(
        f"  A quality floor of {quality_floor_text(STAND_IN_FLOOR)} keeps "
        f"{', '.join(kept) or 'none of them'}" + ("" if excluded else ".")
    )
    for index, why in excluded.items():
        console.print(f"    and excludes stand-in {names[index]}: {why}.")
