"""The builder's evaluation inputs (issue 38, docs/quality.md), translated to and from the
experiment's ``evaluation`` as the API takes it.

Guarantees: the inputs always send the whole evaluation, so saving an edit stores what the
form shows (the stored one when nothing was changed, ``{}`` when "none" is chosen); a value
the form cannot read is passed on as typed, and ``runs.experiment_evaluation`` — the API's
one rule — names what is wrong by its field path (``evaluation.set_id`` …), which
``form_slots.error_slot`` places beside the input.
"""

from __future__ import annotations

from frontend.experiments.form_text import put_number, shown_text

# "pack:<name>" or "set:<id>": one choice, so a set and a pack cannot both be sent by mistake.
SOURCE = "evaluation_source"
JUDGE = "evaluation_judge_endpoint_id"
CONCURRENCY = "evaluation_concurrency"
FLOOR_KIND = "evaluation_floor_kind"
FLOOR_VALUE = "evaluation_floor_value"
EVALUATION_INPUTS = (SOURCE, JUDGE, CONCURRENCY, FLOOR_KIND, FLOOR_VALUE)
FLOOR_KINDS = ("min_score", "max_points_below_best", "max_points_below_best_model")

# Where the API's evaluation paths are shown: evaluation.<name> → the input's error slot.
EVALUATION_SLOTS = {
    "set_id": SOURCE,
    "pack": SOURCE,
    "judge_endpoint_id": JUDGE,
    "concurrency": CONCURRENCY,
    "quality_floor": "evaluation_floor",
}


def evaluation_values(evaluation: dict) -> dict[str, str]:
    """The inputs showing a stored evaluation (all blank for none)."""
    values = dict.fromkeys(EVALUATION_INPUTS, "")
    if not evaluation:
        return values
    if evaluation.get("pack"):
        values[SOURCE] = f"pack:{evaluation['pack']}"
    elif evaluation.get("set_id"):
        values[SOURCE] = f"set:{evaluation['set_id']}"
    values[JUDGE] = str(evaluation.get("judge_endpoint_id") or "")
    values[CONCURRENCY] = shown_text(evaluation.get("concurrency"))
    for kind, value in (evaluation.get("quality_floor") or {}).items():
        values[FLOOR_KIND], values[FLOOR_VALUE] = kind, shown_text(value)
    return values


def evaluation_from_form(values: dict[str, str]) -> dict:
    """The ``evaluation`` the inputs describe: ``{}`` when they are all blank; otherwise
    what was chosen and typed, for the API's check to accept or refuse by field."""
    evaluation: dict = {}
    kind, _, name = values.get(SOURCE, "").strip().partition(":")
    if kind == "pack":
        evaluation["pack"] = name
    elif kind == "set":
        evaluation["set_id"] = name
    elif kind:
        evaluation["set_id"] = kind  # not one of the choices: named by the check
    if values.get(JUDGE, "").strip():
        evaluation["judge_endpoint_id"] = values[JUDGE].strip()
    put_number(evaluation, "concurrency", values.get(CONCURRENCY))
    floor_kind = values.get(FLOOR_KIND, "").strip()
    if floor_kind:
        floor: dict = {}
        put_number(floor, floor_kind, values.get(FLOOR_VALUE))
        evaluation["quality_floor"] = floor  # a kind with no value: refused as incomplete
    return evaluation
