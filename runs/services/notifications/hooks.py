"""An organization's notification hooks: created, deleted and tested.

Guarantees:

- a hook is checked field by field before anything is stored (``DomainValidationError``
  names each field at fault), and its organization may keep only so many
  (``runs.services.hook_limits``);
- a webhook's signing secret is returned once, at its creation; it and a hook's URL are
  stored encrypted; the audit log records a hook by its name, kind, host, addresses and
  events;
- a test, and an e-mail hook's confirmation round, is a notification to that hook alone,
  sent after the commit, within the hour's limits (``RateLimited``: nothing stored or sent).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction

from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import DomainValidationError
from runs.models import (
    HookKind,
    Notification,
    NotificationDelivery,
    NotificationEvent,
    NotificationHook,
    Organization,
)
from runs.models.notifications import SENT_ON_REQUEST
from runs.secrets import encrypt_secret
from runs.services.audited_writes import clean_instance
from runs.services.hook_limits import hook_cap_check, hook_send_check
from runs.services.notifications.outbox import deliveries_send_on_commit
from runs.services.outbound import outbound_url_problem, url_host
from runs.services.text_input import has_control_characters

MAX_RECIPIENTS = 10


@dataclass(frozen=True)
class HookCreated:
    """A new hook, and its signing secret in clear: shown once, never again."""

    hook: NotificationHook
    secret: str | None


def _events_problem(events: list) -> str | None:
    known = set(NotificationEvent.values) - set(SENT_ON_REQUEST)
    if not events:
        return "Choose at least one event."
    unknown = [event for event in events if event not in known]
    if unknown:
        return f"Unknown event {unknown[0]!r}; choose from {', '.join(sorted(known))}."
    return None


def _recipients(text: str) -> tuple[list[str], str | None]:
    addresses = [part.strip() for part in text.split(",") if part.strip()]
    if not addresses:
        return [], "Give at least one e-mail address."
    if len(addresses) > MAX_RECIPIENTS:
        return [], f"At most {MAX_RECIPIENTS} addresses."
    for address in addresses:
        try:
            validate_email(address)  # Django's own rule, as every e-mail field of the site
        except ValidationError:
            return [], f"{address!r} is not an e-mail address."
    return addresses, None


def hook_create(
    *,
    org: Organization,
    actor: Actor,
    name: str,
    kind: str,
    events: list,
    url: str = "",
    email_to: str = "",
) -> HookCreated:
    """A new hook (checked field by field: ``DomainValidationError`` names each; ``Conflict``
    when the organization has all the hooks it may keep); a webhook gets a signing secret,
    returned once; an e-mail hook's addresses are asked to confirm it (``RateLimited``,
    nothing stored, when its organization had all its rounds this hour)."""
    errors: dict[str, list[str]] = {}
    name = name.strip()
    longest = NotificationHook._meta.get_field("name").max_length
    if not name or len(name) > longest:
        errors["name"] = [f"Give a name of 1 to {longest} characters."]
    elif has_control_characters(name):
        errors["name"] = ["A name is one line: no control characters (new lines, tabs)."]
    elif NotificationHook.objects.filter(organization=org, name=name).exists():
        errors["name"] = ["A hook of this organization has this name already."]
    if kind not in HookKind.values:
        errors["kind"] = [f"Choose one of {', '.join(HookKind.values)}."]
    problem = _events_problem(list(events))
    if problem:
        errors["events"] = [problem]
    recipients: list[str] = []
    if kind == HookKind.EMAIL:
        recipients, problem = _recipients(email_to)
        if problem:
            errors["email_to"] = [problem]
    elif kind in HookKind.values:
        problem = outbound_url_problem(url.strip())
        if problem:
            errors["url"] = [problem]
    if errors:
        raise DomainValidationError(errors)
    secret = secrets.token_urlsafe(32) if kind == HookKind.WEBHOOK else None
    hook = NotificationHook(
        organization=org,
        name=name,
        kind=kind,
        events=sorted(set(events)),
        email_to=", ".join(recipients),
        created_by=actor.user,
    )
    if kind != HookKind.EMAIL:
        hook.encrypted_url, hook.url_host = encrypt_secret(url.strip()), url_host(url.strip())
    if secret is not None:
        hook.encrypted_secret, hook.secret_fingerprint = encrypt_secret(secret), secret[-6:]
    clean_instance(hook)  # as stored (addresses joined by ", "), within its columns
    try:
        with transaction.atomic():
            hook_cap_check(org=org)
            hook.save()
            audit_record(
                org=org,
                actor=actor,
                event="notification_hook.create",
                target=hook,
                after=_audited(hook),
            )
            if kind == HookKind.EMAIL:
                summary = f"Confirmation asked of the addresses of “{hook.name}”."
                _sent_on_request(hook, NotificationEvent.HOOK_CONFIRM, summary)
    except IntegrityError:  # another request took the name a moment ago
        raise DomainValidationError.single(
            "name", "A hook of this organization has this name already."
        ) from None
    return HookCreated(hook, secret)


def _audited(hook: NotificationHook) -> dict:
    return {
        "name": hook.name,
        "kind": hook.kind,
        "host": hook.url_host,
        "email_to": hook.email_to,
        "events": hook.events,
        "enabled": hook.enabled,
    }


def hook_delete(*, hook: NotificationHook, actor: Actor) -> None:
    with transaction.atomic():
        audit_record(
            org=hook.organization,
            actor=actor,
            event="notification_hook.delete",
            target=hook,
            before=_audited(hook),
        )
        hook.delete()


def hook_send_test(*, hook: NotificationHook, actor: Actor) -> NotificationDelivery:
    """A ``test`` notification to this hook alone, sent after the commit (an e-mail hook's
    addresses still awaiting confirmation are asked again instead); ``RateLimited``
    (nothing stored or sent) past the hour's tests (``runs.services.hook_limits``)."""
    summary = f"Test of the hook “{hook.name}”, sent by {actor.label}."
    return _sent_on_request(hook, NotificationEvent.TEST, summary)


def _sent_on_request(hook: NotificationHook, event: str, summary: str) -> NotificationDelivery:
    """``event`` to this hook alone, sent after the commit, within the hour's limits."""
    with transaction.atomic():
        hook_send_check(hook=hook)
        notification = Notification.objects.create(
            organization_id=hook.organization_id,
            event=event,
            key=f"{event}:{hook.id}:{time.time_ns()}",
            summary=summary,
            data={"hook": hook.name},
        )
        delivery = NotificationDelivery.objects.create(
            organization_id=hook.organization_id, notification=notification, hook=hook
        )
        deliveries_send_on_commit([delivery.id])
    return delivery
