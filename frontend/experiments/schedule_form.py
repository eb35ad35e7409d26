"""The schedule form on an experiment's page: its inputs and what they show at first."""

from __future__ import annotations

from runs.models.schedules import DEFAULT_THRESHOLDS

SCHEDULE_INPUTS = ("daily_at", "cron", "timezone", "thresholds")


def schedule_form_values(schedule_state: dict | None) -> dict[str, str]:
    """What the form shows before anything is typed: the schedule as set, or the defaults."""
    if schedule_state is None:
        return {"daily_at": "", "cron": "", "timezone": "UTC", "thresholds": DEFAULT_THRESHOLDS}
    return {
        "daily_at": "",
        "cron": schedule_state["cron"],
        "timezone": schedule_state["timezone"],
        "thresholds": schedule_state["thresholds"],
    }
