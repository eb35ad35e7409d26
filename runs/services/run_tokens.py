"""Run tokens: the agent's credential, valid for one run only and only until it ends.

A run's token is derived from its id under the site's ``SECRET_KEY`` (HMAC-SHA256), so every
provisioning attempt hands out the same one: a pod that an earlier attempt rented — a create
that timed out on our side and was carried out later, or a worker killed after the create —
is adopted with a token the site accepts. Only the token's hash is stored; changing
``SECRET_KEY`` invalidates the tokens of runs under way.
"""

from __future__ import annotations

import base64
import hashlib

from django.utils.crypto import salted_hmac

from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES

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


def run_for_token(*, run_id, raw: str | None) -> Run | None:
    """The run ``raw`` was issued for, if it is ``run_id`` and has not ended; else None."""
    if not raw or not raw.startswith(RUN_TOKEN_PREFIX):
        return None
    try:
        return (
            Run.objects.filter(pk=run_id, run_token_hash=_digest(raw))
            .exclude(state__in=TERMINAL_RUN_STATES)
            .first()
        )
    except (ValueError, TypeError):  # a malformed run id names no run
        return None
