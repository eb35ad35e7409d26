"""When a schedule fires and what its gate checks, read from what a person typed.

Guarantees of ``schedule_spec``:
- exactly one of ``cron`` (five fields: minute, hour, day of month, month, day of week, as
  cron and django-celery-beat read them) and ``daily_at`` (``HH:MM``, the same as cron
  ``MM HH * * *``) is given;
- ``timezone`` is an IANA name (``Europe/Berlin``); the cron fields are read in it, so
  "daily at 06:00" stays 06:00 there across daylight-saving changes;
- ``thresholds`` is read by the CLI gate's own parser (``--max-regression`` syntax), so a
  schedule's gate and a pipeline's gate accept exactly the same limits;
- every problem is raised at once as ``DomainValidationError``, keyed by the field.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass

from celery.schedules import crontab
from django.core.exceptions import ValidationError
from django_celery_beat.validators import crontab_validator

from benchsite_cli.gate import ThresholdError, parse_thresholds
from runs.errors import DomainValidationError

CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
_DAILY_AT = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
MAX_THRESHOLDS_CHARS = 500


@dataclass(frozen=True)
class ScheduleSpec:
    cron: dict[str, str]  # CRON_FIELDS → the field's text
    timezone: str
    thresholds: str

    @property
    def cron_text(self) -> str:
        return " ".join(self.cron[name] for name in CRON_FIELDS)


def _cron_problem(text: str) -> tuple[dict[str, str] | None, str]:
    parts = text.split()
    if len(parts) != len(CRON_FIELDS):
        return None, (
            "Give five fields: minute hour day-of-month month day-of-week "
            f"(e.g. “0 6 * * 1-5”), not {len(parts)}."
        )
    try:
        crontab_validator(" ".join(parts))
        crontab(*parts)  # what beat will compute with: it must read it too
    except (ValidationError, ValueError) as exc:
        message = exc.messages[0] if isinstance(exc, ValidationError) else str(exc)
        return None, f"Not a cron expression beat can read: {message}"
    return dict(zip(CRON_FIELDS, parts, strict=True)), ""


def schedule_spec(
    *, cron: str = "", daily_at: str = "", timezone: str = "UTC", thresholds: str
) -> ScheduleSpec:
    """The schedule a person asked for (see the module docstring)."""
    errors: dict[str, list[str]] = {}
    cron, daily_at = cron.strip(), daily_at.strip()
    fields: dict[str, str] | None = None
    if bool(cron) == bool(daily_at):
        errors["cron"] = ["Give either a cron expression or a daily time (HH:MM), not both."]
    elif daily_at:
        match = _DAILY_AT.fullmatch(daily_at)
        if match is None:
            errors["daily_at"] = ["Give the time as HH:MM on a 24-hour clock, e.g. 06:30."]
        else:
            hour, minute = (str(int(part)) for part in match.groups())
            fields = dict(zip(CRON_FIELDS, (minute, hour, "*", "*", "*"), strict=True))
    else:
        fields, problem = _cron_problem(cron)
        if problem:
            errors["cron"] = [problem]
    timezone = timezone.strip() or "UTC"
    try:
        zoneinfo.ZoneInfo(timezone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        errors["timezone"] = [f"Not a time zone name: {timezone[:64]!r} (e.g. Europe/Berlin)."]
    thresholds = thresholds.strip()
    if len(thresholds) > MAX_THRESHOLDS_CHARS:
        errors["thresholds"] = [f"At most {MAX_THRESHOLDS_CHARS} characters."]
    else:
        try:
            parse_thresholds(thresholds)
        except ThresholdError as exc:
            errors["thresholds"] = [f"{exc} (e.g. p99_ttft_ms=10%,output_throughput=-5%)."]
    if errors:
        raise DomainValidationError(errors)
    assert fields is not None
    return ScheduleSpec(cron=fields, timezone=timezone, thresholds=thresholds)
