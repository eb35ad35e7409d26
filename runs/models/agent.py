"""The ledger of what agents sent: every message stored once per (run, epoch, seq)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from runs.models.runs import Run
from runs.models.tenancy import Organization


class AgentMessageRecord(models.Model):
    """One agent message as received. The unique (run, epoch, seq) makes resends harmless:
    a second copy with the same content (``digest``) is acknowledged and dropped; one with
    other content is refused. Each agent incarnation numbers within its own site-issued
    ``epoch``; rows from before epochs existed are epoch 0 with an empty digest."""

    # Always the run's organization (set by ingest).
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="agent_messages")
    epoch = models.PositiveIntegerField(default=0)
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=32)
    payload = models.JSONField()
    # sha256 of the message as validated (canonical JSON); "" for rows stored before digests.
    digest = models.CharField(max_length=64, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "epoch", "seq"], name="agent_message_once")
        ]
        ordering = ["run", "epoch", "seq"]

    def __str__(self) -> str:
        return f"{self.type} #{self.epoch}.{self.seq} of run {self.run_id}"
