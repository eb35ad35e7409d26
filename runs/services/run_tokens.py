"""Run tokens: the agent's credential, valid for one run only, until the run ends and then
for ``BENCHSITE_AGENT_DELIVERY_GRACE_SECONDS`` more, for delivery only: an agent that finished
(or was stopped) while the site could not hear it replays its spool in that time. What an
ended run still accepts is decided in ``runs.services.ingest``.

A run's token is derived from its id under the site's ``SECRET_KEY`` (HMAC-SHA256), so every
provisioning attempt hands out the same one: a pod that an earlier attempt rented — a create
that timed out on our side and was carried out later, or a worker killed after the create —
is adopted with a token the site accepts. Only the token's hash is stored; changing
``SECRET_KEY`` invalidates the tokens of runs under way.
"""

from __future__ import annotations

import base64
import hashlib

from django.db.models import Q
from django.utils import timezone
from django.utils.crypto import salted_hmac

from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES
from runs.selectors.delivery import delivery_open_q

RUN_TOKEN_PREFIX = "bsr_"
_SALT = "benchsite.run-token"


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def run_token_issue(*, run: Run) -> str:
    """The token of ``run`` — the same on every call — with its hash stored on the run."""
    mac = salted_hmac(_SALT, str(run.pk), algorithm="sha256").digest()
    raw = RUN_TOKEN_PREFIX + base64.urlsafe_b64encode(mac).decode("ascii").rstrip("=")
    Run.objects.filter(pk=run.pk).update(run_token_hash=_digest(raw))
    run.run_token_hash = _digest(raw)
    return raw


def unscoped_run_for_token(*, run_id, raw: str | None, delivering: bool = False) -> Run | None:
    """The run ``raw`` was issued for, if it is ``run_id`` and has not ended — or, for
    ``delivering`` (storing the agent's messages, nothing else), ended less than the delivery
    grace ago (``run_delivery_open``); else None.

    Unscoped by necessity: the agent's secret is looked up before any tenant is known — the
    run it names is the only scope the agent ever gets."""
    if not raw or not raw.startswith(RUN_TOKEN_PREFIX):
        return None
    valid = delivery_open_q(timezone.now()) if delivering else ~Q(state__in=TERMINAL_RUN_STATES)
    try:
        return Run.objects.filter(valid, pk=run_id, run_token_hash=_digest(raw)).first()
    except (ValueError, TypeError):  # a malformed run id names no run
        return None
