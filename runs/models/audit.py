"""The governance audit log: append-only and hash-chained per organization."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from runs.models.tenancy import Organization, User


class AuditLogIsAppendOnly(Exception):
    """Raised on any attempt to change or delete an audit event through the ORM."""


class AuditEventQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise AuditLogIsAppendOnly("audit events cannot be updated")

    def delete(self):
        raise AuditLogIsAppendOnly("audit events cannot be deleted")


class AuditEvent(models.Model):
    """One recorded change. ``hash`` covers every field below plus ``prev_hash`` (the hash of
    the organization's previous event), so an edited, removed or reordered row breaks the chain.

    Written only by ``runs.audit.audit_record``, inside the transaction of the change itself.
    """

    organization = models.ForeignKey(
        Organization, on_delete=models.PROTECT, related_name="audit_events"
    )
    seq = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now)
    # The actor's e-mail is copied in: the chain must not depend on a user row that may change.
    actor = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(max_length=254)
    actor_via = models.CharField(max_length=64)
    event = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=300)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    # Text, not inet: the hash must see exactly the string that was stored.
    ip = models.CharField(max_length=45, null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "seq"], name="audit_unique_seq")
        ]
        indexes = [
            models.Index(fields=["organization", "-seq"]),
            models.Index(fields=["organization", "event"]),
        ]
        ordering = ["-seq"]

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise AuditLogIsAppendOnly("audit events cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise AuditLogIsAppendOnly("audit events cannot be deleted")

    def __str__(self) -> str:
        return f"{self.organization_id}#{self.seq} {self.event}"


class AuditChainCheckpoint(models.Model):
    """How far an organization's chain is known to verify, and the last full verification.

    ``seq``/``hash``: every event up to ``seq`` linked up and matched its hash when it was
    checked (``verified_at``), and event ``seq`` had ``hash``; the page then verifies only the
    events after it. ``full_*``: the last walk of the whole chain from its first event, and the
    break it found, if any — which the page shows until a full walk verifies again.
    Written only by ``runs.audit``.
    """

    organization = models.OneToOneField(
        Organization, on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)
    verified_at = models.DateTimeField()
    full_verified_at = models.DateTimeField(null=True, blank=True)
    full_break_seq = models.PositiveBigIntegerField(null=True, blank=True)
    full_break_event_id = models.BigIntegerField(null=True, blank=True)
    full_break_reason = models.CharField(max_length=200, blank=True)

    def __str__(self) -> str:
        return f"{self.organization_id} verified to #{self.seq}"
