"""A run's answer in words: as the run pages print it and a run's end notification carries
it.

``answer_state`` writes ``runs.selectors.run_answer``'s answer for people: money as
``$0.5000``, loads as ``concurrency 31``, a capacity search's bracket and why it stopped,
a quality score and its drift in percent, each configuration under its label (the flags
that vary). It sits below the pages and the notifications, so the page and the webhook say
the same thing; the figures themselves are the selector's, never recomputed here.
"""

from __future__ import annotations

from runs.models import Run
from runs.run_as_started import run_planned_trials
from runs.selectors.run_answer import ConfigAnswer, RunAnswer, run_answer
from runs.selectors.run_levels import config_label, number, planned_trial_labels
from runs.selectors.trial_quality import quality_floor_text

STOP_REASONS = {
    "converged": "converged",
    "probes_exhausted": "its probe budget was spent",
    "max_load": "every load up to the maximum met the SLOs",
    "below_lowest": "even the lowest load missed the SLOs",
    "stopped": "the trial ended first",
}


def load_text(axis: str | None, load: float | None) -> str:
    """``concurrency 31`` or ``request rate 2.5/s``: a load on a capacity search's axis."""
    if load is None:
        return "—"
    if axis == "request_rate":
        return f"request rate {load:g}/s"
    return f"concurrency {load:g}"


def capacity_text(capacity: dict | None) -> dict | None:
    """What a trial's capacity search found (``Trial.capacity``), as the pages print it."""
    if not capacity:
        return None
    axis, found = capacity.get("axis"), capacity.get("capacity")
    low, high = capacity.get("bracket_low"), capacity.get("bracket_high")
    # The high end was missed, or too close to call (not confidently met).
    above = "too close to call" if capacity.get("bracket_high_verdict") == "too_close" else "missed"
    if found is None:
        bracket = "no load met the SLOs"
    elif high is None:
        bracket = f"met at {low:g}; no load above it missed"
    else:
        bracket = f"bracket {low:g}–{high:g} (met at {low:g}, {above} at {high:g})"
        missed = capacity.get("first_missed")
        if missed is not None and missed != high:
            bracket += f"; first missed at {missed:g}, the most it can be"
    repeats = capacity.get("repeats") or 0
    probes = f"{capacity.get('probes', 0)} probe{'s' if capacity.get('probes') != 1 else ''}"
    if repeats:
        probes += f" + {repeats} repeat{'s' if repeats != 1 else ''}"
    reason = capacity.get("stop_reason")
    return {
        "axis": axis,
        "capacity": found,
        "text": load_text(axis, found) if found is not None else "none",
        "bracket": bracket,
        "probes": probes,
        "stop_reason": STOP_REASONS.get(reason, reason or ""),
        "output_throughput": number(capacity.get("output_throughput")),
    }


def _money(amount) -> str | None:
    return None if amount is None else f"${amount}"


def _points(value: float, sign: bool = False) -> str:
    return f"{value * 100:+.1f}" if sign else f"{value * 100:.1f}"


def _quality_state(quality: dict | None) -> dict | None:
    """A configuration's quality (``runs.selectors.trial_quality``) as the pages print it:
    the score in %, its interval, and the drift from the reference in words."""
    if quality is None:
        return None
    state = dict(quality)
    if quality["score"] is not None:
        state["score_text"] = f"{_points(quality['score'])} %"
        state["interval_text"] = f"{_points(quality['low'])}–{_points(quality['high'])} %"
    found = quality.get("drift")
    if found is not None:
        share = found["changed_share"]
        drift = dict(found)
        drift["changed_text"] = f"{found['changed']} of {found['compared']}"
        if share is not None:
            low_high = f"{_points(share[1])}–{_points(share[2])} %"
            drift["changed_text"] += f" ({_points(share[0])} %, {low_high})"
        difference = found["score_difference"]
        drift["difference_text"] = (
            None
            if difference is None
            else f"{_points(difference[0], True)} pts ({_points(difference[1], True)} to "
            f"{_points(difference[2], True)})"
        )
        state["drift"] = drift
    return state


def _config_state(config: ConfigAnswer | None, labels: dict[int, str]) -> dict | None:
    if config is None:
        return None
    ci = config.usd_per_million_ci95
    # A trial that has not searched (yet) has no bracket: never "no load met the SLOs".
    bracket = (
        capacity_text(
            {
                "axis": config.axis,
                "capacity": config.capacity,
                "bracket_low": config.bracket_low,
                "bracket_high": config.bracket_high,
                "bracket_high_verdict": config.bracket_high_verdict,
                "probes": config.probes,
                "stop_reason": config.stop_reason,
            }
        )
        if config.axis is not None
        else None
    )
    return {
        "trial": config.trial,
        "label": labels.get(config.trial) or config_label(config.serve_config, []),
        "capacity": config.capacity,
        "capacity_text": load_text(config.axis, config.capacity),
        "bracket": bracket["bracket"] if bracket else "",
        "usd_per_million": _money(config.usd_per_million_output_tokens),
        "usd_per_million_ci95": None if ci is None else [_money(ci[0]), _money(ci[1])],
        "output_throughput": config.output_throughput,
        "serve_command": config.serve_command,
        "quality": _quality_state(config.quality),
        "note": config.note,
        "priced_for": config.priced_for,
        "quality_floor": config.quality_floor,
    }


def answer_state(answer: RunAnswer, labels: dict[int, str]) -> dict:
    """The run's answer (``runs.selectors.run_answer``) as the pages print it: money as
    ``$0.5000``, loads as ``concurrency 31``, each configuration under its label."""
    margin_ci = answer.margin_ci95_pct
    return {
        "simulated": answer.simulated,
        "slos": answer.slos or "none",
        "winner": _config_state(answer.winner, labels),
        "runner_up": _config_state(answer.runner_up, labels),
        "tie": answer.tie,
        "margin_pct": answer.margin_pct,
        "margin_ci95_pct": None if margin_ci is None else list(margin_ci),
        "pod_usd_per_hr": _money(answer.pod_usd_per_hr),
        "configs": [_config_state(config, labels) for config in answer.configs],
        # Whether the run scores its configurations on an evaluation (a column each).
        "quality": any(config.quality is not None for config in answer.configs),
        "defaults": _config_state(answer.defaults, labels),
        "over_defaults": None if answer.over_defaults is None else answer.over_defaults.as_json(),
        # The quality floor in words (None: none) and the configurations it excluded or could
        # not judge, each under its label.
        "quality_floor": (
            None if answer.quality_floor is None else quality_floor_text(answer.quality_floor)
        ),
        "excluded_for_quality": _labelled(answer.excluded_for_quality, labels),
        "quality_not_judged": _labelled(answer.quality_not_judged, labels),
    }


def _labelled(listed: list[dict], labels: dict[int, str]) -> list[dict]:
    return [{**item, "label": labels.get(item["trial"], "")} for item in listed]


def run_answer_state(*, run: Run) -> dict:
    """``answer_state`` of ``run``, each configuration labelled by the flags that vary."""
    labels = planned_trial_labels(run_planned_trials(run))
    return answer_state(run_answer(run=run), labels)
