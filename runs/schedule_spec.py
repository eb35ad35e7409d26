"""When a schedule fires and what its gate checks, read from what a person typed.

Guarantees of ``schedule_spec``:
- exactly one of ``cron`` (five fields: minute, hour, day of month, month, day of week, as
  cron and django-celery-beat read them) and ``daily_at`` (``HH:MM``, the same as cron
  ``MM HH * * *``) is given;
- no two consecutive firings are closer than ``SCHEDULE_MIN_INTERVAL_MINUTES`` on the
  schedule's clock: while a run is under way each firing is refused, and a schedule every
  minute would write a refusal a minute;
- ``timezone`` is an IANA name (``Europe/Berlin``); the cron fields are read in it, so
  "daily at 06:00" stays 06:00 there across daylight-saving changes;
- ``thresholds`` is read by the CLI gate's own parser (``--max-regression`` syntax), so a
  schedule's gate and a pipeline's gate accept exactly the same limits;
- every problem is raised at once as ``DomainValidationError``, keyed by the field.
"""

from __future__ import annotations

import datetime
import itertools
import re
import zoneinfo
from dataclasses import dataclass

from celery.schedules import crontab
from django.conf import settings
from django.core.exceptions import ValidationError
from django_celery_beat.models import CrontabSchedule
from django_celery_beat.validators import crontab_validator

from benchsite_cli.gate import ThresholdError, parse_thresholds
from runs.errors import DomainValidationError
from runs.models.schedules import ExperimentSchedule

CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
_DAILY_AT = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
MAX_THRESHOLDS_CHARS = ExperimentSchedule._meta.get_field("thresholds").max_length
# Whole cycles of the calendar's weekdays (28 years from 2001; the cycle holds to 2099): in
# one, every date, 29 February included, falls on every weekday.
_CALENDAR_CYCLE_START = datetime.date(2001, 1, 1).toordinal()
_CALENDAR_CYCLE_DAYS = 28 * 365 + 7
_MINUTES_A_DAY = 24 * 60


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
    fields = dict(zip(CRON_FIELDS, parts, strict=True))
    try:
        crontab_validator(" ".join(parts))
        _beat_row_check(fields)
        crontab(**fields)  # what beat will compute with: it must read it too
    except (ValidationError, ValueError) as exc:
        message = exc.messages[0] if isinstance(exc, ValidationError) else str(exc)
        return None, f"Not a cron expression beat can read: {message}"
    return fields, ""


def _beat_row_check(fields: dict[str, str]) -> None:
    """Beat's own row's checks of each field (``CrontabSchedule``: its syntax and its
    column's length), raised as one ``ValidationError`` naming the field in words."""
    try:
        CrontabSchedule(**fields).full_clean(
            exclude=["timezone"], validate_unique=False, validate_constraints=False
        )
    except ValidationError as exc:
        name, messages = next(iter(exc.message_dict.items()))
        label = str(CrontabSchedule._meta.get_field(name).verbose_name).lower()
        raise ValidationError(f"the {label} field: {messages[0]}") from None


def _closest_firings(fields: dict[str, str]) -> int | None:
    """The fewest minutes between two consecutive firings of the cron ``fields`` on the
    schedule's own clock, as celery's ``crontab`` (what beat computes with) reads them: a
    day fires when its month, day of month and day of week all match, at every listed hour
    and minute. None when it fires at most once in a calendar cycle."""
    schedule = crontab(**fields)
    times = sorted(hour * 60 + minute for hour in schedule.hour for minute in schedule.minute)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    # From a fired day's last firing to the next fired day's first: the fewer days between
    # them the closer, so the search ends at the first two consecutive fired days.
    last_day = None
    for ordinal in range(_CALENDAR_CYCLE_START, _CALENDAR_CYCLE_START + _CALENDAR_CYCLE_DAYS):
        day = datetime.date.fromordinal(ordinal)
        if (
            day.month in schedule.month_of_year
            and day.day in schedule.day_of_month
            and day.isoweekday() % 7 in schedule.day_of_week  # celery's Sunday is 0
        ):
            if last_day is not None:
                gaps.append((ordinal - last_day) * _MINUTES_A_DAY + times[0] - times[-1])
                if ordinal - last_day == 1:
                    break
            last_day = ordinal
    return min(gaps, default=None)


def _interval_problem(fields: dict[str, str]) -> str:
    minimum = settings.SCHEDULE_MIN_INTERVAL_MINUTES
    closest = _closest_firings(fields)
    if closest is None or closest >= minimum:
        return ""
    return (
        f"Fires {closest} minute{'s' if closest != 1 else ''} apart at the closest; a schedule "
        f"fires at most every {minimum} minutes."
    )


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
    if fields is not None and (problem := _interval_problem(fields)):
        errors["daily_at" if daily_at else "cron"] = [problem]
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
