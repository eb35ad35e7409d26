"""Attempts and retries: a delivery's log, and when it is tried again.

Guarantees: a delivery is tried up to ``MAX_ATTEMPTS`` times, each retry
``BACKOFF_SECONDS`` × 2^(n−1) after the n-th failure (a timeout, a refused connection, any
status but 2xx), then it is ``failed``; one that no retry can mend (nobody may be written
to) fails at once. Every attempt leaves its status code or error in the delivery log; two
workers never send one delivery at once. A retry whose task was lost (a worker died) is
found by ``deliveries_due`` for the sweep (``notifications_sweep``).
"""

from __future__ import annotations

import datetime
import logging

from django.db import transaction
from django.utils import timezone

from runs.models import DeliveryStatus, NotificationDelivery
from runs.services.notifications.transport import delivery_send

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 6
BACKOFF_SECONDS = 30


def delivery_attempt(delivery_id) -> float | None:
    """Tries a pending delivery once and records how it went; returns the seconds until its
    retry is due, None when it needs none (delivered, failed for good, or not pending)."""
    # The row stays locked through the call, so two workers never send one delivery at once.
    with transaction.atomic():
        delivery = (
            NotificationDelivery.objects.select_for_update(skip_locked=True)
            .select_related("hook__organization", "notification")
            .filter(id=delivery_id, status=DeliveryStatus.PENDING)
            .first()
        )
        if delivery is None:
            return None  # sent already, or another worker has it now
        attempt = delivery_send(delivery)
        error = attempt.error
        now = timezone.now()
        delivery.attempts += 1
        delivery.last_attempt_at = now
        delivery.last_status_code = attempt.status_code
        # A sent one's note (addresses awaiting confirmation) is what the log says of it.
        delivery.last_error = (error or attempt.note)[:500]
        retry_in = None
        if not error:
            delivery.status, delivery.delivered_at = DeliveryStatus.DELIVERED, now
        elif attempt.final or delivery.attempts >= MAX_ATTEMPTS:
            delivery.status = DeliveryStatus.FAILED
        else:
            retry_in = BACKOFF_SECONDS * 2 ** (delivery.attempts - 1)
            delivery.next_attempt_at = now + datetime.timedelta(seconds=retry_in)
        delivery.save()
    if error:
        logger.warning(
            "notification %s to hook %s: attempt %d %s",
            delivery.id,
            delivery.hook_id,
            delivery.attempts,
            error,
        )
    return retry_in


def deliveries_due(*, now: datetime.datetime | None = None) -> list:
    """Pending deliveries whose retry is overdue by a sweep period: their task was lost."""
    now = now or timezone.now()
    late = now - datetime.timedelta(seconds=BACKOFF_SECONDS)
    return list(
        NotificationDelivery.objects.filter(
            status=DeliveryStatus.PENDING, next_attempt_at__lte=late
        ).values_list("id", flat=True)[:500]
    )
