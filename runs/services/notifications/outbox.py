"""Recording what an organization's hooks are to be told.

Guarantees of ``notify``: it runs inside the transaction of the change it reports, so a
notification exists if and only if its fact was committed; a fact (``key``) is notified
once per organization however often it is reported (a late agent message, a retried task);
every enabled hook that asked for the event gets one delivery, sent by a worker after the
commit (``runs.services.notifications.delivery``).
"""

from __future__ import annotations

from django.db import IntegrityError, transaction

from runs.models import Notification, NotificationDelivery, NotificationHook
from runs.task_queue import enqueue_after_commit


def notify(*, org_id, event: str, key: str, summary: str, data: dict) -> Notification | None:
    """Records ``event`` for the organization (once per ``key``) and a delivery to each hook
    that asked for it; sent after the caller's transaction commits. Returns the new
    notification; None when this fact was notified before, or no hook asked for it (then
    nothing is stored)."""
    hooks = hooks_for(org_id, event)
    if not hooks:
        return None
    try:
        with transaction.atomic():  # a savepoint: a duplicate leaves the caller's work whole
            notification = Notification.objects.create(
                organization_id=org_id,
                event=event,
                key=key[:200],
                summary=summary[:500],
                data=data,
            )
    except IntegrityError:
        return None
    deliveries = NotificationDelivery.objects.bulk_create(
        NotificationDelivery(organization_id=org_id, notification=notification, hook=hook)
        for hook in hooks
    )
    deliveries_send_on_commit([delivery.id for delivery in deliveries])
    return notification


def hooks_for(org_id, event: str) -> list[NotificationHook]:
    """The organization's enabled hooks that asked for ``event``."""
    hooks = NotificationHook.objects.filter(organization_id=org_id, enabled=True)
    return [hook for hook in hooks if event in hook.events]


def deliveries_send_on_commit(delivery_ids: list) -> None:
    """Sends each delivery (its task) once the current transaction commits."""
    for delivery_id in delivery_ids:
        enqueue_after_commit("runs.tasks.notification_deliver", str(delivery_id))
