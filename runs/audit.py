"""Writing and verifying the hash-chained audit log.

Guarantees: ``audit_record`` appends exactly one event to the organization's chain, inside the
caller's transaction, so the event exists if and only if the change it records was committed.
``audit_verify`` recomputes every hash and reports the first row that does not match.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import uuid
from dataclasses import dataclass

from django.db import models, transaction

from runs.actors import Actor
from runs.models import AuditEvent, Organization

GENESIS_HASH = "0" * 64
# Secrets and blobs never enter the log, not even hashed.
_NEVER_AUDITED = {"token_hash", "run_token_hash", "password", "file"}


def _jsonable(value):
    if isinstance(value, decimal.Decimal):
        # 2.5 and 2.5000 (as the database returns it) are one value, not a change.
        return format(value.normalize(), "f")
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def audit_snapshot(instance: models.Model) -> dict:
    """A JSON-safe dict of the instance's own fields (foreign keys by id), secrets left out."""
    snapshot = {}
    for field in instance._meta.concrete_fields:
        if field.name in _NEVER_AUDITED:
            continue
        snapshot[field.attname] = _jsonable(getattr(instance, field.attname))
    # Round-trip through JSON so what we hash is exactly what the database gives back.
    return json.loads(json.dumps(snapshot, default=str))


def audit_diff(before: dict, after: dict) -> tuple[dict, dict]:
    """Only the keys whose values changed, as (before, after)."""
    keys = [key for key in after if before.get(key) != after.get(key)]
    return {key: before.get(key) for key in keys}, {key: after[key] for key in keys}


def _event_hash(event: AuditEvent) -> str:
    payload = {
        "organization": str(event.organization_id),
        "seq": event.seq,
        "created_at": event.created_at.astimezone(datetime.UTC).isoformat(),
        "actor": event.actor_label,
        "via": event.actor_via,
        "event": event.event,
        "target_type": event.target_type,
        "target_id": event.target_id,
        "target_repr": event.target_repr,
        "before": event.before,
        "after": event.after,
        "ip": event.ip,
        "prev_hash": event.prev_hash,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def audit_record(
    *,
    org: Organization,
    actor: Actor,
    event: str,
    target: models.Model,
    before: dict | None = None,
    after: dict | None = None,
) -> AuditEvent:
    """Append one event (``noun.verb``) to ``org``'s chain, in the caller's transaction."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("audit_record must run inside the transaction of the change")
    # Lock the organization row: appends to one chain are serialised, other tenants unaffected.
    Organization.objects.select_for_update().filter(pk=org.pk).first()
    last = AuditEvent.objects.filter(organization=org).order_by("-seq").first()
    row = AuditEvent(
        organization=org,
        seq=(last.seq + 1) if last else 1,
        actor=actor.user,
        actor_label=actor.label,
        actor_via=actor.via,
        event=event,
        target_type=target._meta.model_name,
        target_id=str(target.pk),
        target_repr=str(target)[:300],
        before=before,
        after=after,
        ip=actor.ip,
        prev_hash=last.hash if last else GENESIS_HASH,
    )
    row.hash = _event_hash(row)
    row.save()
    return row


@dataclass(frozen=True)
class ChainBreak:
    """The first row of a chain that does not verify, and why."""

    organization_slug: str
    seq: int
    event_id: int
    reason: str


def audit_verify(org: Organization) -> ChainBreak | None:
    """Walk ``org``'s chain in order; None when every row verifies."""
    expected_prev = GENESIS_HASH
    expected_seq = 1
    for row in AuditEvent.objects.filter(organization=org).order_by("seq").iterator():
        if row.seq != expected_seq:
            return ChainBreak(org.slug, row.seq, row.id, f"sequence gap: expected #{expected_seq}")
        if row.prev_hash != expected_prev:
            return ChainBreak(org.slug, row.seq, row.id, "previous-hash link does not match")
        if _event_hash(row) != row.hash:
            return ChainBreak(org.slug, row.seq, row.id, "contents do not match the stored hash")
        expected_prev = row.hash
        expected_seq += 1
    return None
