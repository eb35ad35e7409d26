"""Reading the audit log: the one filter, the one order and the one row format that the web
page and the API share.

Guarantees:
- ``audit_filter_parse`` gives the same query (or the same refusal, naming the field) for the
  same parameters, whoever asks. ``since``/``until`` take a date (``YYYY-MM-DD``: a whole UTC
  day, the ``until`` day included) or an ISO 8601 date-time (an instant; ``since`` included,
  ``until`` excluded; without an offset it is UTC). ``actor`` matches, ignoring case, the whole
  actor label (an e-mail address or a system actor's name) or the address's name before the
  ``@``. ``target`` is free text (the target's type, its id, or part of its description);
  ``target_type`` and ``target_id`` match exactly. ``event`` is an event name, or a noun with
  a trailing dot for all its events (``token.``).
- Order: the paginated list and page show the newest event first (``audit_log``); exports
  come oldest first (``audit_export``), in chain order, so each row's ``prev_hash`` is the
  previous row's ``hash`` and an export can be verified as it is read.
- ``audit_row`` is the only row format: the API's list, its exports and the page's export all
  carry it, with the keys inside ``before``/``after`` sorted, so for the same query every
  export is byte-identical.
"""

from __future__ import annotations

import csv
import datetime
import io
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from itertools import islice

from django.db.models import Q, QuerySet

from runs.errors import DomainValidationError
from runs.models import AuditEvent, Organization

AUDIT_COLUMNS = (
    "seq",
    "created_at",
    "actor",
    "via",
    "event",
    "target_type",
    "target_id",
    "target_repr",
    "before",
    "after",
    "ip",
    "prev_hash",
    "hash",
)
EXPORT_FORMATS = ("csv", "json")
TEXT_FILTERS = ("event", "actor", "target", "target_type", "target_id")
TIME_FILTERS = ("since", "until")
# Rows per database round trip and per streamed chunk of an export.
EXPORT_CHUNK = 500
# Real time zones lie within UTC-12:00 … UTC+14:00; PostgreSQL refuses offsets much beyond.
_MAX_OFFSET = datetime.timedelta(hours=15)
_TIME_HELP = "Give a date (YYYY-MM-DD) or a date-time (ISO 8601, e.g. 2025-07-01T09:30:00Z)."


@dataclass(frozen=True)
class AuditFilter:
    """A parsed filter. ``since`` is included, ``until`` excluded; both are UTC instants."""

    event: str = ""
    actor: str = ""
    target: str = ""
    target_type: str = ""
    target_id: str = ""
    since: datetime.datetime | None = None
    until: datetime.datetime | None = None


def audit_filter_parse(params: Mapping[str, str]) -> AuditFilter:
    """The filter the query parameters ask for. Raises ``DomainValidationError`` naming each
    bad field: a malformed time, an impossible offset, text the database cannot hold, or an
    end before the start."""
    errors: dict[str, list[str]] = {}
    text = {}
    for field in TEXT_FILTERS:
        value = (params.get(field) or "").strip()
        if "\x00" in value:
            errors[field] = ["Null characters are not allowed."]
        text[field] = value
    since = _instant(params.get("since"), "since", end=False, errors=errors)
    until = _instant(params.get("until"), "until", end=True, errors=errors)
    # Dates end after their day, so "until" the day before "since" is an empty range too.
    if since and until and until <= since:
        errors["until"] = ["The end is not after the start."]
    if errors:
        raise DomainValidationError(errors)
    return AuditFilter(**text, since=since, until=until)


def _instant(
    raw: str | None, field: str, *, end: bool, errors: dict[str, list[str]]
) -> datetime.datetime | None:
    value = (raw or "").strip()
    if not value:
        return None
    try:
        day = datetime.date.fromisoformat(value) if len(value) == 10 else None
        if day is not None:
            # A whole UTC day: the end of an until day is the start of the next one.
            day += datetime.timedelta(days=1) if end else datetime.timedelta()
            return datetime.datetime.combine(day, datetime.time(), datetime.UTC)
        instant = datetime.datetime.fromisoformat(value)
    except (ValueError, OverflowError):
        errors[field] = [_TIME_HELP]
        return None
    offset = instant.utcoffset()
    if offset is None:
        return instant.replace(tzinfo=datetime.UTC)
    if abs(offset) > _MAX_OFFSET:
        errors[field] = ["The UTC offset is out of range (at most ±15:00)."]
        return None
    return instant


def _matching(org: Organization, query: AuditFilter) -> QuerySet[AuditEvent]:
    events = AuditEvent.objects.filter(organization=org)
    if query.event:
        # A trailing dot selects a whole noun ("token." → token.create, token.revoke).
        events = (
            events.filter(event__startswith=query.event)
            if query.event.endswith(".")
            else events.filter(event=query.event)
        )
    if query.actor:
        events = events.filter(
            Q(actor_label__iexact=query.actor) | Q(actor_label__istartswith=f"{query.actor}@")
        )
    if query.target:
        events = events.filter(
            Q(target_type__iexact=query.target)
            | Q(target_id=query.target)
            | Q(target_repr__icontains=query.target)
        )
    if query.target_type:
        events = events.filter(target_type=query.target_type)
    if query.target_id:
        events = events.filter(target_id=query.target_id)
    if query.since:
        events = events.filter(created_at__gte=query.since)
    if query.until:
        events = events.filter(created_at__lt=query.until)
    return events


def audit_log(*, org: Organization, query: AuditFilter) -> QuerySet[AuditEvent]:
    """The organization's events matching ``query``, newest first (for paging)."""
    return _matching(org, query).order_by("-seq")


def audit_row(event: AuditEvent) -> dict:
    """One event as the API lists it and every export writes it (JSON-ready values)."""
    return {
        "seq": event.seq,
        "created_at": _timestamp(event.created_at),
        "actor": event.actor_label,
        "via": event.actor_via,
        "event": event.event,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "target_repr": event.target_repr,
        "before": _sorted_keys(event.before),
        "after": _sorted_keys(event.after),
        "ip": event.ip,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def _timestamp(value: datetime.datetime) -> str:
    # As DRF writes a date-time: ISO 8601 in UTC, "Z" for the offset.
    return value.astimezone(datetime.UTC).isoformat().removesuffix("+00:00") + "Z"


def _sorted_keys(value):
    # PostgreSQL's jsonb keeps its own key order (shortest first); sorted keys make an
    # export the same whatever the storage did.
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


@dataclass(frozen=True)
class AuditExport:
    """A streamed export: its lines (in chunks), content type and file name."""

    chunks: Iterator[str]
    content_type: str
    filename: str


def audit_export(*, org: Organization, query: AuditFilter, file_format: str) -> AuditExport:
    """The events matching ``query``, oldest first (chain order), as CSV (a header, then one
    line per event; ``before``/``after`` as JSON) or as JSON lines (one object per event)."""
    if file_format not in EXPORT_FORMATS:
        raise DomainValidationError.single("as", "Expected 'csv' or 'json'.")
    events = _matching(org, query).order_by("seq").iterator(chunk_size=EXPORT_CHUNK)
    rows = (audit_row(event) for event in events)
    if file_format == "csv":
        return AuditExport(_csv_chunks(rows), "text/csv; charset=utf-8", f"audit-{org.slug}.csv")
    return AuditExport(_json_chunks(rows), "application/x-ndjson", f"audit-{org.slug}.jsonl")


def _csv_chunks(rows: Iterable[dict]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(AUDIT_COLUMNS)
    yield buffer.getvalue()
    rows = iter(rows)
    while chunk := list(islice(rows, EXPORT_CHUNK)):
        buffer.seek(0)
        buffer.truncate()
        for row in chunk:
            writer.writerow([_csv_cell(row[column]) for column in AUDIT_COLUMNS])
        yield buffer.getvalue()


def _csv_cell(value) -> str | int:
    if isinstance(value, dict | list):
        return json.dumps(value)
    return "" if value is None else value


def _json_chunks(rows: Iterable[dict]) -> Iterator[str]:
    rows = iter(rows)
    while chunk := list(islice(rows, EXPORT_CHUNK)):
        yield "".join(json.dumps(row) + "\n" for row in chunk)
