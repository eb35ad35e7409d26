"""One attempt to send a notification's delivery to its hook.

Guarantees:

- a webhook's body is JSON: ``id`` (the delivery, the same on every retry), ``event``,
  ``created_at``, ``organization`` (its slug), ``summary`` and ``data``; it is signed with
  the hook's own secret: ``X-Benchsite-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
  "<t>.<body>">`` (``signature``, which receivers can use to check it), beside
  ``X-Benchsite-Event`` and ``X-Benchsite-Delivery``;
- a Slack hook gets ``{"text": …}``; an e-mail hook a plain-text mail through Django's
  e-mail backend, to the addresses that confirmed it only
  (``runs.services.hook_recipients``; the others are named "awaiting confirmation", and a
  notification none may receive fails for good);
- a request goes only where ``runs.services.outbound`` lets it; its receiver's status
  counts, never its body; an attempt's error names the failure's kind only, never the URL's
  path, a header or a secret.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import time
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction

from runs.models import HookKind, NotificationDelivery, NotificationEvent
from runs.secrets import SecretUnreadable, decrypt_secret
from runs.selectors.hook_recipients import hook_addresses
from runs.services.hook_recipients import confirmation_mails_send
from runs.services.outbound import OutboundRefused, outbound_request, outbound_target
from runs.services.text_input import one_line

TIMEOUT_SECONDS = 10
USER_AGENT = "Benchsite-Notifications/1"


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Benchsite-Signature`` header's value for ``body`` sent at ``timestamp``."""
    signed = f"{timestamp}.".encode() + body
    digest = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={digest}"


def _webhook_body(delivery: NotificationDelivery) -> bytes:
    notification = delivery.notification
    body = {
        "id": str(delivery.id),
        "event": notification.event,
        "created_at": notification.created_at.astimezone(datetime.UTC).isoformat(),
        "organization": delivery.hook.organization.slug,
        "summary": notification.summary,
        "data": notification.data,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


@dataclass(frozen=True)
class Attempt:
    """How one attempt went: the receiver's status code, why it failed ("": it was sent),
    whether no retry can mend that (``final``), and what the log says of a sent one."""

    status_code: int | None = None
    error: str = ""
    final: bool = False
    note: str = ""


def _post(url: str, body: bytes, headers: dict) -> Attempt:
    """POSTs ``body`` to the address ``url``'s host resolves to now, if it may be called
    (``runs.services.outbound``), with an error that names no part of the URL. The
    receiver's body is not read: only its status counts."""
    try:
        target = outbound_target(url)
    except OutboundRefused as refused:
        return Attempt(error=f"refused: {refused}")
    try:
        with outbound_request(
            target, "POST", headers=headers, content=body, timeout=TIMEOUT_SECONDS
        ) as response:
            status = response.status_code
    except httpx.TimeoutException:
        return Attempt(error="timed out")
    except httpx.HTTPError as error:
        return Attempt(error=f"connection failed ({type(error).__name__})")
    return Attempt(status, "" if 200 <= status < 300 else f"HTTP {status}")


def delivery_send(delivery: NotificationDelivery) -> Attempt:
    """One send, whatever becomes of it, with an error naming a failure's kind only (an
    exception's message may hold an address or a secret)."""
    try:
        with transaction.atomic():  # a savepoint: a failed query leaves the log writable
            return _send(delivery)
    except SecretUnreadable:
        return Attempt(
            error="the hook's URL or secret cannot be decrypted (CREDENTIALS_ENCRYPTION_KEY)"
        )
    except OSError as error:  # the mail relay, refusing or unreachable
        return Attempt(error=f"e-mail not sent ({type(error).__name__})")
    except Exception as error:  # every failure is an attempt, never a delivery left pending
        return Attempt(error=f"the attempt failed ({type(error).__name__})")


def _mail(delivery: NotificationDelivery) -> Attempt:
    """An e-mail hook's attempt: the notification to the addresses that confirmed the hook;
    the others are asked to confirm it on its confirmation round and its tests (see
    ``runs.services.hook_recipients``), and named as awaiting confirmation in the log."""
    hook, notification = delivery.hook, delivery.notification
    addresses = hook_addresses(hook)
    awaiting = ", ".join(addresses.awaiting)
    if notification.event == NotificationEvent.HOOK_CONFIRM:
        confirmation_mails_send(hook, addresses.awaiting)
        asked = f"confirmation asked of {awaiting}" if awaiting else "every address confirmed"
        return Attempt(note=asked)
    if addresses.confirmed:
        # Names and summaries are people's text: a new line in a header would be refused.
        subject = one_line(f"[Benchsite · {hook.organization.name}] {notification.summary}")[:200]
        text = f"{notification.summary}\n\nEvent: {notification.event}\n\n" + json.dumps(
            notification.data, indent=2, sort_keys=True
        )
        send_mail(subject, text, settings.DEFAULT_FROM_EMAIL, addresses.confirmed)
    asked_again = notification.event == NotificationEvent.TEST and bool(addresses.awaiting)
    if asked_again:
        confirmation_mails_send(hook, addresses.awaiting)
    if not addresses.confirmed and not asked_again:
        # Nobody may be written to: retrying would not change that.
        return Attempt(error=f"awaiting confirmation: {awaiting}", final=True)
    note = f"awaiting confirmation: {awaiting}" if awaiting else ""
    return Attempt(note=note + " (asked again)" if asked_again else note)


def _send(delivery: NotificationDelivery) -> Attempt:
    hook, notification = delivery.hook, delivery.notification
    if hook.kind == HookKind.EMAIL:
        return _mail(delivery)
    url = decrypt_secret(hook.encrypted_url)
    if hook.kind == HookKind.SLACK:
        text = f"[Benchsite · {hook.organization.name}] {notification.summary}"
        body = json.dumps({"text": text}).encode()
        return _post(url, body, {"Content-Type": "application/json", "User-Agent": USER_AGENT})
    body = _webhook_body(delivery)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Benchsite-Event": notification.event,
        "X-Benchsite-Delivery": str(delivery.id),
        "X-Benchsite-Signature": signature(
            decrypt_secret(hook.encrypted_secret), int(time.time()), body
        ),
    }
    return _post(url, body, headers)
