"""Writing and verifying the hash-chained audit log.

Guarantees: ``audit_record`` appends exactly one event to the organization's chain, inside the
caller's transaction, so the event exists if and only if the change it records was committed.
``audit_verify`` recomputes every hash and reports the first row that does not match.

Verifying a chain of tens of thousands of events on every view of the log is too dear, so
each organization has a checkpoint (``AuditChainCheckpoint``):

- ``audit_chain_check`` (the log page) verifies only the events after the checkpoint — each
  links to the one before and matches its hash — and re-hashes the checkpoint's own event
  against the hash recorded when it was verified; then it moves the checkpoint to the newest
  event. It detects any edit, removal or insertion at or after the checkpoint, and shows the
  break a full verification found until a later one verifies the whole chain again.
  It does *not* re-read events before the checkpoint: an event edited after it was verified
  (by hand, in the database) is found by the next full verification, not by the page.
- ``audit_chain_verify_full`` (``manage.py audit_verify``, to be run periodically) walks the
  whole chain from its first event and records the outcome on the checkpoint: its time, and
  the break it found, if any.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import uuid
from dataclasses import dataclass

from django.db import models, transaction
from django.utils import timezone

from runs.actors import Actor
from runs.models import AuditChainCheckpoint, AuditEvent, Organization

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
    chain_break, _, _ = _walk(org, AuditEvent.objects.filter(organization=org), 1, GENESIS_HASH)
    return chain_break


def _walk(org, events, seq: int, prev_hash: str) -> tuple[ChainBreak | None, int, str]:
    """Verifies ``events`` in order, the first being #``seq`` linked to ``prev_hash``: the
    first break (None when there is none), and the seq and hash of the last event verified
    before it (``seq - 1`` and ``prev_hash`` when none was)."""
    expected_prev, expected_seq = prev_hash, seq
    for row in events.order_by("seq").iterator(chunk_size=2000):
        reason = None
        if row.seq != expected_seq:
            reason = f"sequence gap: expected #{expected_seq}"
        elif row.prev_hash != expected_prev:
            reason = "previous-hash link does not match"
        elif _event_hash(row) != row.hash:
            reason = "contents do not match the stored hash"
        if reason is not None:
            return ChainBreak(org.slug, row.seq, row.id, reason), expected_seq - 1, expected_prev
        expected_prev = row.hash
        expected_seq += 1
    return None, expected_seq - 1, expected_prev


@dataclass(frozen=True)
class ChainStatus:
    """What the log page may say of a chain (see the module docstring).

    ``chain_break``: the first break found now after the checkpoint, else the one the last
    full verification found. ``verified_through``: the newest event verified so far.
    ``full_verified_at``: when the whole chain was last walked (None: never).
    ``checked``: how many events this check read.
    """

    chain_break: ChainBreak | None
    verified_through: int
    full_verified_at: datetime.datetime | None
    checked: int


def audit_chain_check(*, org: Organization) -> ChainStatus:
    """Verifies ``org``'s chain from its checkpoint on and moves the checkpoint to the newest
    event that verified (see the module docstring for what that does and does not prove)."""
    checkpoint = AuditChainCheckpoint.objects.filter(organization=org).first()
    if checkpoint is not None and checkpoint.full_break_seq is not None:
        recorded = ChainBreak(
            org.slug,
            checkpoint.full_break_seq,
            checkpoint.full_break_event_id,
            checkpoint.full_break_reason,
        )
        return ChainStatus(recorded, checkpoint.seq, checkpoint.full_verified_at, 0)
    events = AuditEvent.objects.filter(organization=org)
    if checkpoint is None or checkpoint.seq == 0:  # nothing verified yet: from the first
        chain_break, last_seq, last_hash = _walk(org, events, 1, GENESIS_HASH)
        checked = last_seq + (chain_break is not None)
    else:
        # The checkpoint's own event must still be the one verified: re-hashed, and its hash
        # the one recorded. The events after it are walked from there.
        chain_break = _checkpoint_break(org, checkpoint)
        last_seq, last_hash = checkpoint.seq, checkpoint.hash
        checked = 1
        if chain_break is None:
            newer = events.filter(seq__gt=checkpoint.seq)
            chain_break, last_seq, last_hash = _walk(
                org, newer, checkpoint.seq + 1, checkpoint.hash
            )
            checked += last_seq - checkpoint.seq + (chain_break is not None)
    # Up to the last event that verified, even before a break: the next view starts there
    # and finds the break again, cheaply, as long as it is there.
    if last_seq > 0:
        _checkpoint_advance(org=org, seq=last_seq, hash_=last_hash)
    full_verified_at = None if checkpoint is None else checkpoint.full_verified_at
    return ChainStatus(chain_break, last_seq, full_verified_at, checked)


def _checkpoint_break(org, checkpoint: AuditChainCheckpoint) -> ChainBreak | None:
    row = AuditEvent.objects.filter(organization=org, seq=checkpoint.seq).first()
    if row is None:
        return ChainBreak(org.slug, checkpoint.seq, 0, "a verified event is missing")
    if row.hash != checkpoint.hash or _event_hash(row) != row.hash:
        return ChainBreak(
            org.slug, row.seq, row.id, "contents do not match the hash verified earlier"
        )
    return None


def _checkpoint_advance(*, org: Organization, seq: int, hash_: str, full: bool = False) -> None:
    """Moves ``org``'s checkpoint forward to #``seq`` (never back: a concurrent check may have
    gone further); ``full`` also records a whole-chain verification, which clears a break."""
    now = timezone.now()
    AuditChainCheckpoint.objects.bulk_create(
        [AuditChainCheckpoint(organization=org, seq=seq, hash=hash_, verified_at=now)],
        ignore_conflicts=True,
    )
    checkpoints = AuditChainCheckpoint.objects.filter(organization=org)
    if full:
        checkpoints.update(
            full_verified_at=now,
            full_break_seq=None,
            full_break_event_id=None,
            full_break_reason="",
        )
    else:
        # A break recorded meanwhile by a full verification stays until one verifies again.
        checkpoints = checkpoints.filter(full_break_seq__isnull=True)
    checkpoints.filter(seq__lt=seq).update(seq=seq, hash=hash_, verified_at=now)


def audit_chain_verify_full(*, org: Organization) -> ChainBreak | None:
    """Walks ``org``'s whole chain (``audit_verify``) and records the outcome on its
    checkpoint: the break, shown by the log page until a later full walk verifies; or the
    time, with the checkpoint moved to the newest event."""
    chain_break, last_seq, last_hash = _walk(
        org, AuditEvent.objects.filter(organization=org), 1, GENESIS_HASH
    )
    if chain_break is None:
        if last_seq > 0:
            _checkpoint_advance(org=org, seq=last_seq, hash_=last_hash, full=True)
        return None
    now = timezone.now()
    AuditChainCheckpoint.objects.update_or_create(
        organization=org,
        defaults={
            "full_verified_at": now,
            "full_break_seq": chain_break.seq,
            "full_break_event_id": chain_break.event_id,
            "full_break_reason": chain_break.reason[:200],
        },
        create_defaults={
            "seq": 0,
            "hash": GENESIS_HASH,
            "verified_at": now,
            "full_verified_at": now,
            "full_break_seq": chain_break.seq,
            "full_break_event_id": chain_break.event_id,
            "full_break_reason": chain_break.reason[:200],
        },
    )
    return chain_break
