"""Run tokens: the agent's credential, valid for one run only and only until it ends."""

from __future__ import annotations

import hashlib
import secrets

from runs.models import Run
from runs.models.runs import TERMINAL_RUN_STATES

RUN_TOKEN_PREFIX = "bsr_"


def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def run_token_issue(*, run: Run) -> str:
    """A new token for ``run`` (replacing any earlier one); only its hash is stored."""
    raw = RUN_TOKEN_PREFIX + secrets.token_urlsafe(32)
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
