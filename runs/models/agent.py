"""The ledger of what agents sent: every message stored once per (run, seq)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from runs.models.runs import Run


class AgentMessageRecord(models.Model):
    """One agent message as received. The unique (run, seq) makes resends harmless: the
    second copy is acknowledged and dropped."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="agent_messages")
    seq = models.PositiveBigIntegerField()
    type = models.CharField(max_length=32)
    payload = models.JSONField()
    received_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="agent_message_once")]
        ordering = ["run", "seq"]

    def __str__(self) -> str:
        return f"{self.type} #{self.seq} of run {self.run_id}"
