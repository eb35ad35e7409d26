"""Whether the site could hear its agents: reconcile's probe of its own ingest.

An agent is judged silent against the site's ability to receive, not against the clock
alone: while the web tier (or the proxy in front of it) is down, every agent is silent and
spools; once it is back, agents need time to reconnect and replay. So, before its silence
checks, the reconcile pass probes the very address agents are given
(``BENCHSITE_PUBLIC_URL`` + ``/healthz``) and records the answer in the ``IngestProbe`` row.

Guarantees of ``ingest_hearing``:
- it returns ``IngestHearing(reachable=False)`` when the probe failed: no silence verdict
  may be given in this pass;
- else ``since``: when the current unbroken stretch of good probes began. An agent's silence
  is counted from the later of its last message and ``since``, so a site that just came back
  gives every agent a whole silence window to replay its spool. ``since`` is None only when
  no outage was ever seen (the first probe of an installation, and every good one after it);
- a stretch is unbroken only while good probes follow each other within the silence window:
  a reconcile that did not run for longer (a stopped worker or beat, a whole site restarted)
  cannot vouch for that time, so ingest counts as just back;
- the state survives restarts (one database row, written with one statement per pass); the
  recorded error names the failure (an exception class or an HTTP status), never the address
  or a response body.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass

import httpx
from django.conf import settings

from runs.models import IngestProbe
from runs.models.ingest import SINGLETON_ID

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS = 5.0
PROBE_PATH = "/healthz"


@dataclass(frozen=True)
class IngestHearing:
    """What a reconcile pass may assume about the site's ability to hear agents."""

    reachable: bool
    since: datetime.datetime | None = None  # start of the unbroken stretch (None: ever)


def ingest_probe() -> str | None:
    """One cheap request to the address agents report to; None when it answered 200, else
    why not (no address or secret in the text)."""
    base = settings.BENCHSITE_PUBLIC_URL.rstrip("/")
    try:
        response = httpx.get(f"{base}{PROBE_PATH}", timeout=PROBE_TIMEOUT_SECONDS)
    except httpx.HTTPError as exc:
        return type(exc).__name__
    if response.status_code != 200:
        return f"HTTP {response.status_code}"
    return None


def ingest_hearing(*, now: datetime.datetime, window: datetime.timedelta) -> IngestHearing:
    """Probes ingest, records the answer, and says what silence may be judged against (see
    the module docstring); ``window`` is the silence window."""
    error = ingest_probe()
    before = IngestProbe.objects.filter(id=SINGLETON_ID).first()
    if error is not None:
        unreachable_since = before.unreachable_since if before and before.unreachable_since else now
        if before is None or before.unreachable_since is None:
            logger.warning("ingest unreachable (%s): no agent is judged silent meanwhile", error)
        _record(now, reachable_since=None, unreachable_since=unreachable_since, error=error)
        return IngestHearing(reachable=False)
    unbroken = (
        before is not None
        and before.unreachable_since is None
        and before.probed_at is not None
        and now - before.probed_at <= window
    )
    if before is None:
        since = None  # the first probe ever: no outage to make up for
    elif unbroken:
        since = before.reachable_since  # None: still the stretch of the first probe
    else:
        since = now  # back after an outage, or after a gap nobody probed
        logger.warning("ingest reachable again: every agent gets a silence window to replay")
    _record(now, reachable_since=since, unreachable_since=None, error="")
    return IngestHearing(reachable=True, since=since)


def _record(now, *, reachable_since, unreachable_since, error: str) -> None:
    # One statement whether the row exists or not: the pass's queries stay a fixed number.
    IngestProbe.objects.bulk_create(
        [
            IngestProbe(
                id=SINGLETON_ID,
                probed_at=now,
                reachable_since=reachable_since,
                unreachable_since=unreachable_since,
                last_error=error[:200],
            )
        ],
        update_conflicts=True,
        unique_fields=["id"],
        update_fields=["probed_at", "reachable_since", "unreachable_since", "last_error"],
    )
