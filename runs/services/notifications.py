"""Telling an organization's hooks what happened: webhooks, Slack-compatible incoming
webhooks and e-mail.

Guarantees:

- ``notify`` runs inside the transaction of the change it reports, so a notification exists
  if and only if its fact was committed; a fact (``key``) is notified once per organization
  however often it is reported (a late agent message, a retried task); every enabled hook
  that asked for the event gets one delivery, sent by a worker after the commit.
- A delivery is tried up to ``MAX_ATTEMPTS`` times, each retry ``BACKOFF_SECONDS`` × 2^(n−1)
  after the n-th failure (a timeout, a refused connection, any status but 2xx), then it is
  ``failed``; every attempt leaves its status code or error in the delivery log. A retry
  whose task was lost (a worker died) is sent by the sweep (``notifications_sweep``).
- A webhook's body is JSON: ``id`` (the delivery, the same on every retry), ``event``,
  ``created_at``, ``organization`` (its slug), ``summary`` and ``data``; it is signed with the
  hook's own secret: ``X-Benchsite-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of
  "<t>.<body>">`` (``signature``, which receivers can use to check it), beside
  ``X-Benchsite-Event`` and ``X-Benchsite-Delivery``. A Slack hook gets ``{"text": …}``; an
  e-mail hook a plain-text mail through Django's e-mail backend, to the addresses that
  confirmed it only (``runs.services.hook_recipients``; the log names the others "awaiting
  confirmation", and a notification none may receive fails at once).
- An organization's hooks, and the tests and confirmation rounds sent to them, are limited
  (``runs.services.hook_limits``); deliveries travel on their own queue
  (``benchsite.queues``).
- Secrets never leave: the URL (its path may be a credential, as Slack's is) and the signing
  secret are stored encrypted; the delivery log and every error keep the receiver's status
  or the failure's kind only, never the URL's path, a header or a secret; the audit log
  records a hook by its name, kind and host.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import DomainValidationError
from runs.models import (
    DeliveryStatus,
    HookKind,
    Notification,
    NotificationDelivery,
    NotificationEvent,
    NotificationHook,
    Organization,
)
from runs.models.notifications import SENT_ON_REQUEST
from runs.secrets import SecretUnreadable, decrypt_secret, encrypt_secret
from runs.selectors.hook_recipients import hook_addresses
from runs.services.audited_writes import clean_instance
from runs.services.hook_limits import hook_cap_check, hook_send_check
from runs.services.hook_recipients import confirmation_mails_send
from runs.services.outbound import (
    OutboundRefused,
    outbound_request,
    outbound_target,
    outbound_url_problem,
    url_host,
)
from runs.services.text_input import has_control_characters, one_line
from runs.task_queue import enqueue_after_commit

logger = logging.getLogger(__name__)

MAX_ATTEMPTS = 6
BACKOFF_SECONDS = 30
TIMEOUT_SECONDS = 10
USER_AGENT = "Benchsite-Notifications/1"
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


def notify(*, org_id, event: str, key: str, summary: str, data: dict) -> Notification | None:
    """Records ``event`` for the organization (once per ``key``) and a delivery to each hook
    that asked for it; sent after the caller's transaction commits. Returns the new
    notification; None when this fact was notified before, or no hook asked for it (then
    nothing is stored)."""
    hooks = _hooks_for(org_id, event)
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
    _send_on_commit([delivery.id for delivery in deliveries])
    return notification


def _hooks_for(org_id, event: str) -> list[NotificationHook]:
    """The organization's enabled hooks that asked for ``event``."""
    hooks = NotificationHook.objects.filter(organization_id=org_id, enabled=True)
    return [hook for hook in hooks if event in hook.events]


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
        _send_on_commit([delivery.id])
    return delivery


def _send_on_commit(delivery_ids: list) -> None:
    for delivery_id in delivery_ids:
        enqueue_after_commit("runs.tasks.notification_deliver", str(delivery_id))


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


def _attempt(delivery: NotificationDelivery) -> Attempt:
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
        attempt = _attempt(delivery)
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


# ---- the events ------------------------------------------------------------------------

_RUN_END_EVENTS = {
    "succeeded": NotificationEvent.RUN_FINISHED,
    "cancelled": NotificationEvent.RUN_FINISHED,
    "failed": NotificationEvent.RUN_FAILED,
    "over_budget": NotificationEvent.RUN_OVER_BUDGET,
}


def _page(path: str) -> str:
    return settings.BENCHSITE_PUBLIC_URL.rstrip("/") + path


def notify_run_ended(run) -> None:
    """A run's end (in the transaction that ended it): finished, failed or over budget, with
    its answer as the run page gives it (the recommended configuration, its capacity at the
    SLOs and cost per 1M output tokens, its serve command), named in the summary."""
    from runs.selectors.run_pages import run_answer_state  # pages' reads; only at a run's end

    event = _RUN_END_EVENTS.get(str(run.state))
    if event is None or not _hooks_for(run.organization_id, event):
        return  # nobody to tell: the answer is not even read
    name = run.experiment.name
    reason = f": {run.failure_reason}" if run.failure_reason else ""
    answer = run_answer_state(run=run)
    winner = answer["winner"]
    best = (
        f" — best: {winner['label'] or 'defaults'} ({winner['capacity_text']} at the SLOs, "
        f"{winner['usd_per_million']} per 1M output tokens)"
        if winner
        else ""
    )
    notify(
        org_id=run.organization_id,
        event=event,
        key=f"run.end:{run.id}",
        summary=f"Run {str(run.id)[:8]} of “{name}” {run.state}{reason}{best}",
        data={
            "answer": answer,
            "run": str(run.id),
            "experiment": str(run.experiment_id),
            "experiment_name": name,
            "state": str(run.state),
            "reason": run.failure_reason,
            "cost_usd": str(run.cost_usd),
            "url": _page(f"/o/{run.organization.slug}/runs/{run.id}/"),
        },
    )


def notify_regression(firing) -> None:
    """A scheduled run that regressed against the promoted baseline (in the transaction that
    ended it), with the failing rows in words."""
    run, gate = firing.run, firing.gate
    name = firing.schedule.experiment.name
    worst = gate["regressions"][0] if gate.get("regressions") else None
    detail = (
        f": {worst['metric']} at {worst['config']} {worst['level']}, {worst['change']}"
        if worst
        else ""
    )
    notify(
        org_id=run.organization_id,
        event=NotificationEvent.REGRESSION_DETECTED,
        key=f"regression:{run.id}",
        summary=f"Scheduled run {str(run.id)[:8]} of “{name}” regressed against the "
        f"promoted baseline{detail}",
        data={
            "run": str(run.id),
            "experiment": str(run.experiment_id),
            "experiment_name": name,
            "gate": gate,
            "url": _page(f"/o/{run.organization.slug}/runs/{run.id}/"),
        },
    )


def notify_promotion(promotion, event: str) -> None:
    """A promotion proposed or approved (in the transaction that changed it); a sandbox's
    simulated promotion says so in its summary (``str(promotion)``) and its data."""
    verb = "proposed" if event == NotificationEvent.PROMOTION_PROPOSED else "approved"
    notify(
        org_id=promotion.organization_id,
        event=event,
        key=f"{event}:{promotion.id}",
        summary=f"Promotion {verb} for “{promotion.experiment.name}”: {promotion}",
        data={
            "promotion": str(promotion.id),
            "experiment": str(promotion.experiment_id),
            "state": str(promotion.state),
            "simulated": promotion.simulated,
            "url": _page(f"/o/{promotion.organization.slug}/promotions/{promotion.id}/"),
        },
    )


def notify_budget_use(*, org: Organization, month: datetime.date) -> None:
    """The month's budget 80 % and 100 % used, each once per budget, month and limit (a
    changed limit is crossed anew), as the spend crosses it: checked by each reconcile pass
    after it records the active runs' costs, and at each run's end."""
    from runs.selectors.spend import budget_capping_month, org_month_spend_usd

    if not any(
        _hooks_for(org.id, event)
        for event in (NotificationEvent.BUDGET_80, NotificationEvent.BUDGET_100)
    ):
        return
    budget = budget_capping_month(org.budgets.all(), month)
    if budget is None or not budget.limit_usd:
        return
    spend = org_month_spend_usd(org=org, month=month)
    for share, event in ((80, NotificationEvent.BUDGET_80), (100, NotificationEvent.BUDGET_100)):
        if spend * 100 >= budget.limit_usd * share:
            notify(
                org_id=org.id,
                event=event,
                key=f"{event}:{budget.id}:{month.isoformat()}:{budget.limit_usd}",
                summary=(
                    f"{share} % of the {month:%B %Y} budget used: ${spend} of ${budget.limit_usd}"
                ),
                data={
                    "month": month.isoformat(),
                    "spend_usd": str(spend),
                    "budget_usd": str(budget.limit_usd),
                    "share": share,
                },
            )
