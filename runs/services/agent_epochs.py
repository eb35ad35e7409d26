"""Sequence spaces for agents: each agent that starts without its spool gets an epoch.

Guarantees of ``agent_epoch_issue``:
- every call for a run returns a new epoch, larger than every one issued for it before
  (1 first), also when agents of the same run ask at the same moment: the counter is
  incremented by one conditional UPDATE, which PostgreSQL serializes on the run's row;
- nothing else about the run changes. An epoch that goes unused (an agent that died right
  after asking) costs nothing: the ledger only checks that a message's epoch was issued.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import F

from runs.models import Run

logger = logging.getLogger(__name__)


@transaction.atomic
def agent_epoch_issue(*, run_id) -> int:
    """Issues the next epoch of ``run_id`` and returns it (``Run.DoesNotExist`` if none)."""
    if not Run.objects.filter(pk=run_id).update(agent_epoch=F("agent_epoch") + 1):
        raise Run.DoesNotExist(run_id)
    # Our UPDATE holds the row's lock until commit: the value read here is ours.
    epoch = Run.objects.filter(pk=run_id).values_list("agent_epoch", flat=True).get()
    logger.info("run %s: agent epoch %d issued", run_id, epoch)
    return epoch
