"""What one organization may ask of its notification hooks: how many it keeps, and how many
tests (and confirmation rounds of e-mail addresses) they are sent an hour.

Guarantees:

- An organization keeps at most ``BENCHSITE_MAX_HOOKS_PER_ORG`` hooks: one more is refused
  (``Conflict``) and nothing is stored.
- In any hour a hook is sent at most ``BENCHSITE_HOOK_TESTS_PER_HOUR`` tests and
  confirmation rounds, and an organization's hooks ``BENCHSITE_ORG_HOOK_TESTS_PER_HOUR``
  together (a deleted hook's count to the end of their hour): one more is refused
  (``RateLimited``, naming when the next may go) and nothing is stored or sent.
- Each check runs with the organization's row locked, in the transaction that then writes,
  so two requests at once never both take the last place.
"""

from __future__ import annotations

import datetime
import math

from django.conf import settings
from django.utils import timezone

from runs.errors import Conflict, RateLimited
from runs.models import Notification, NotificationDelivery, NotificationHook, Organization
from runs.models.notifications import SENT_ON_REQUEST

WINDOW = datetime.timedelta(hours=1)


def _lock(org: Organization) -> None:
    # The same lock as the audit chain's: held to the end of the caller's transaction.
    Organization.objects.select_for_update().filter(pk=org.pk).first()


def hook_cap_check(*, org: Organization) -> None:
    """Raises ``Conflict`` when ``org`` has all the hooks it may keep; call it inside the
    transaction that adds one."""
    _lock(org)
    cap = settings.BENCHSITE_MAX_HOOKS_PER_ORG
    if NotificationHook.objects.filter(organization=org).count() >= cap:
        raise Conflict(
            f"This organization has {cap} hooks, the most it may keep "
            "(BENCHSITE_MAX_HOOKS_PER_ORG); delete one to add another."
        )


def _refused(sent_at: list[datetime.datetime], limit: int, now, whose: str) -> RateLimited:
    free_at = min(sent_at) + WINDOW
    wait = max(1, math.ceil((free_at - now).total_seconds()))
    return RateLimited(
        f"{whose} {limit} tests or confirmation rounds in the last hour, the most allowed; "
        f"try again after {free_at:%H:%M:%S} UTC (in {math.ceil(wait / 60)} min).",
        retry_after=wait,
    )


def hook_send_check(*, hook: NotificationHook) -> None:
    """Raises ``RateLimited`` when ``hook`` (or its organization's hooks together) had all the
    tests and confirmation rounds they may have this hour; call it inside the transaction
    that sends one."""
    _lock(hook.organization)
    now = timezone.now()
    since = now - WINDOW
    limit = settings.BENCHSITE_HOOK_TESTS_PER_HOUR
    sent_at = list(
        NotificationDelivery.objects.filter(
            hook=hook, notification__event__in=SENT_ON_REQUEST, created_at__gt=since
        ).values_list("created_at", flat=True)
    )
    if len(sent_at) >= limit:
        raise _refused(sent_at, limit, now, f"The hook “{hook.name}” was sent")
    limit = settings.BENCHSITE_ORG_HOOK_TESTS_PER_HOUR
    sent_at = list(
        Notification.objects.filter(
            organization_id=hook.organization_id, event__in=SENT_ON_REQUEST, created_at__gt=since
        ).values_list("created_at", flat=True)
    )
    if len(sent_at) >= limit:
        raise _refused(sent_at, limit, now, "This organization's hooks were sent")
