"""What a client may send to set or pause an experiment's schedule (``runs.schedule_spec``
reads the times and thresholds field by field)."""

from __future__ import annotations

from rest_framework import serializers

from runs.inputs.strict_fields import StrictBooleanField, StrictCharField
from runs.models.schedules import DEFAULT_THRESHOLDS
from runs.schedule_spec import MAX_THRESHOLDS_CHARS


class ScheduleSetSerializer(serializers.Serializer):
    cron = StrictCharField(
        max_length=200,
        required=False,
        default="",
        allow_blank=True,
        help_text="Five cron fields (minute hour day-of-month month day-of-week), e.g. "
        "“0 6 * * 1-5”; or leave empty and give daily_at.",
    )
    daily_at = StrictCharField(
        max_length=5,
        required=False,
        default="",
        allow_blank=True,
        help_text="HH:MM, every day (the same as cron “MM HH * * *”).",
    )
    timezone = StrictCharField(
        max_length=64,
        required=False,
        default="UTC",
        help_text="IANA time zone the cron fields are read in, e.g. Europe/Berlin.",
    )
    thresholds = StrictCharField(
        max_length=MAX_THRESHOLDS_CHARS,
        required=False,
        default=DEFAULT_THRESHOLDS,
        help_text="The regression gate's limits against the promoted baseline, as the CLI's "
        "--max-regression takes them.",
    )
    paused = StrictBooleanField(required=False, default=False)


class SchedulePauseSerializer(serializers.Serializer):
    paused = StrictBooleanField()
