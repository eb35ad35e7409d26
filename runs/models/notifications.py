"""An organization's notification hooks, what happened that they are told of, and every
attempt to tell them (``runs.services.notifications``).

- ``NotificationHook``: where to tell — a webhook (JSON signed with the hook's own secret), a
  Slack-compatible incoming webhook, or e-mail — and which events. Its URL and secret are
  stored encrypted (``runs.secrets``): a Slack URL is itself a credential, and a webhook's
  URL may carry one; only the host and the secret's fingerprint are ever shown.
- ``Notification``: one event of the organization, once (``key``: a second report of the same
  fact — a late message, a retried task — adds nothing).
- ``NotificationDelivery``: one notification to one hook, with its attempts: the delivery log.
  Its error text is the receiver's status or the connection's failure, never a secret.
- ``ConfirmedRecipient``: an address of an e-mail hook that followed its confirmation link;
  an e-mail hook writes to these only (``runs.services.hook_recipients``).
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from runs.models.tenancy import Organization, User


class NotificationEvent(models.TextChoices):
    """What a hook may be told of."""

    RUN_FINISHED = "run.finished", "Run finished (succeeded or cancelled)"
    RUN_FAILED = "run.failed", "Run failed"
    RUN_OVER_BUDGET = "run.over_budget", "Run stopped at its budget cap"
    REGRESSION_DETECTED = (
        "regression.detected",
        "Scheduled run regressed against the promoted baseline",
    )
    PROMOTION_PROPOSED = "promotion.proposed", "Promotion proposed"
    PROMOTION_APPROVED = "promotion.approved", "Promotion approved"
    BUDGET_80 = "budget.80_percent", "Budget 80 % used"
    BUDGET_100 = "budget.100_percent", "Budget 100 % used"
    TEST = "test", "Test (the hook's “send test”)"
    HOOK_CONFIRM = "hook.confirm", "Confirmation asked of an e-mail hook's addresses"


# What a person sends a hook by asking (limited per hour: runs.services.hook_limits); the
# other events are what a hook may ask to be told of.
SENT_ON_REQUEST = (NotificationEvent.TEST, NotificationEvent.HOOK_CONFIRM)


class HookKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON, HMAC-signed)"
    SLACK = "slack", "Slack-compatible incoming webhook"
    EMAIL = "email", "E-mail"


class NotificationHook(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="notification_hooks"
    )
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=16, choices=HookKind.choices)
    encrypted_url = models.TextField(blank=True)  # webhook and Slack kinds
    url_host = models.CharField(max_length=255, blank=True)  # what is shown of the URL
    encrypted_secret = models.TextField(blank=True)  # webhook kind: the HMAC key
    secret_fingerprint = models.CharField(max_length=8, blank=True)
    email_to = models.CharField(max_length=1000, blank=True)  # e-mail kind: comma-separated
    events = models.JSONField(default=list)  # NotificationEvent values
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["name", "created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "name"], name="notificationhook_name_per_org"
            )
        ]

    def __str__(self) -> str:
        # Shown in the audit log: the kind and where, never the URL's path or a secret.
        return f"{self.name} ({self.kind} → {self.url_host or self.email_to})"


class Notification(models.Model):
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=32, choices=NotificationEvent.choices)
    key = models.CharField(max_length=200)  # the fact it reports, once per organization
    summary = models.CharField(max_length=500)  # one line, for Slack and e-mail
    data = models.JSONField(default=dict)  # the webhook body's ``data``
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "key"], name="notification_once_per_fact"
            )
        ]

    def __str__(self) -> str:
        return f"{self.event}: {self.summary}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed (no attempt left)"


class NotificationDelivery(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    notification = models.ForeignKey(
        Notification, on_delete=models.CASCADE, related_name="deliveries"
    )
    hook = models.ForeignKey(NotificationHook, on_delete=models.CASCADE, related_name="deliveries")
    status = models.CharField(
        max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "next_attempt_at"])]
        constraints = [
            models.UniqueConstraint(fields=["notification", "hook"], name="delivery_once_per_hook")
        ]

    def __str__(self) -> str:
        return f"{self.notification.event} → {self.hook.name}: {self.status}"


class ConfirmedRecipient(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    hook = models.ForeignKey(
        NotificationHook, on_delete=models.CASCADE, related_name="confirmed_recipients"
    )
    address = models.CharField(max_length=254)  # as the hook's email_to lists it
    confirmed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["confirmed_at"]
        constraints = [
            models.UniqueConstraint(fields=["hook", "address"], name="recipient_confirmed_once")
        ]

    def __str__(self) -> str:
        return f"{self.address} for {self.hook.name}"
