"""The delivery window: how long after its run ended an agent may still deliver what it holds
(``BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS``). The run token (``runs.services.run_tokens``),
ingest and the reports' "figures are final" rule read it here, once."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES


def delivery_grace() -> datetime.timedelta:
    """How long after its run ended an agent may still deliver what it holds."""
    return datetime.timedelta(seconds=float(settings.BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS))


def delivery_open_q(now: datetime.datetime) -> Q:
    """The runs whose agents may still deliver at ``now`` (see ``run_delivery_open``)."""
    return ~Q(state__in=TERMINAL_RUN_STATES) | Q(finished_at__gt=now - delivery_grace())


def run_delivery_open(run: Run, *, now: datetime.datetime | None = None) -> bool:
    """Whether ``run``'s agent may still deliver: the run is active, or ended less than the
    delivery grace ago."""
    if run.state not in TERMINAL_RUN_STATES:
        return True
    now = now or timezone.now()
    return run.finished_at is not None and run.finished_at > now - delivery_grace()
