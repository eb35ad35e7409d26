"""What the reconcile task last learned about the site's own ability to receive agents."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

SINGLETON_ID = 1


class IngestProbe(models.Model):
    """One row: the latest probe of the address agents report to (``BENCHSITE_PUBLIC_URL``)
    by the reconcile task. Agents cannot be called silent while the site could not hear them:
    ``reachable_since`` (None while unreachable) is when the current unbroken stretch of
    good probes began."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=SINGLETON_ID)
    probed_at = models.DateTimeField(null=True, blank=True)
    reachable_since = models.DateTimeField(null=True, blank=True)
    unreachable_since = models.DateTimeField(null=True, blank=True)
    # Why the last probe failed ("" when it answered): an exception class or HTTP status,
    # never the address (it may hold credentials) nor a response body.
    last_error = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(id=SINGLETON_ID), name="ingest_probe_singleton")
        ]

    def __str__(self) -> str:
        return "ingest probe"
