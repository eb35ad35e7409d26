"""Asking an e-mail hook's addresses whether they want its mail, and recording their yes.

Guarantees:

- Each address is asked by a mail of fixed words: the organization's and the hook's names
  (each made one line) are the only words in it a person chose, so the site cannot be made
  to carry anyone's message to an address that never agreed to it.
- The mail's link is signed for that address of that hook (``django.core.signing``, its own
  salt) and holds for ``LINK_DAYS`` days; an altered or expired link, or one whose hook is
  gone or no longer lists the address, confirms nothing.
- Following the link needs no sign-in and changes nothing; confirming on its page records
  that address of that hook only, once however often it is done, audited
  (``notification_hook.confirm_recipient``).
- Which addresses may be written to is ``runs.selectors.hook_recipients``; the rounds of
  asking are sent and rate-limited as tests are (``runs.services.notifications.hooks``).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.core.mail import send_mass_mail
from django.db import IntegrityError, transaction
from django.urls import reverse

from runs.actors import Actor
from runs.audit import audit_record
from runs.models import ConfirmedRecipient, HookKind, NotificationHook
from runs.services.text_input import one_line

LINK_DAYS = 7
CONFIRMATION_SUBJECT = "Confirm notifications from Benchsite"
_SALT = "benchsite.notification-hook.recipient"
_TEXT = """\
The organization “{org}” on Benchsite added this address to its notification hook “{hook}”.

Nothing is sent to this address until it is confirmed. To receive the hook's notifications,
open this link and confirm:

{link}

If you did not expect this mail, ignore it.
"""


@dataclass(frozen=True)
class LinkedRecipient:
    """The address of the hook a confirmation link names, and whether it has confirmed."""

    hook: NotificationHook
    address: str
    confirmed: bool


def confirmation_token(hook: NotificationHook, address: str) -> str:
    """The signed token of the link that asks ``address`` to confirm ``hook``."""
    return signing.dumps([str(hook.id), address], salt=_SALT, compress=True)


def _link(hook: NotificationHook, address: str) -> str:
    path = reverse("notification-recipient-confirm", args=[confirmation_token(hook, address)])
    return settings.BENCHSITE_PUBLIC_URL.rstrip("/") + path


def confirmation_mails_send(hook: NotificationHook, addresses: list[str]) -> None:
    """One confirmation mail to each of ``addresses`` (of ``hook``), each with its own link;
    raises what the e-mail backend raises."""
    org, name = one_line(hook.organization.name), one_line(hook.name)
    send_mass_mail(
        (
            CONFIRMATION_SUBJECT,
            _TEXT.format(org=org, hook=name, link=_link(hook, address)),
            settings.DEFAULT_FROM_EMAIL,
            [address],
        )
        for address in addresses
    )


def recipient_from_link(token: str) -> LinkedRecipient | None:
    """The address and hook a link's token names; None for a token altered, expired, of a
    hook that is gone, or of an address the hook no longer lists."""
    try:
        hook_id, address = signing.loads(
            token, salt=_SALT, max_age=datetime.timedelta(days=LINK_DAYS)
        )
        hook = (
            NotificationHook.objects.select_related("organization")
            .filter(id=hook_id, kind=HookKind.EMAIL)
            .first()
        )
    except (signing.BadSignature, ValueError, TypeError):
        return None
    if hook is None or address not in hook.email_to.split(", "):
        return None
    confirmed = ConfirmedRecipient.objects.filter(hook=hook, address=address).exists()
    return LinkedRecipient(hook, address, confirmed)


def recipient_confirm(*, token: str, actor: Actor) -> LinkedRecipient | None:
    """Records that the address a link names agrees to its hook's mail (once, audited);
    None, and nothing recorded, for a link ``recipient_from_link`` refuses."""
    linked = recipient_from_link(token)
    if linked is None or linked.confirmed:
        return linked
    hook = linked.hook
    try:
        with transaction.atomic():
            ConfirmedRecipient.objects.create(
                organization_id=hook.organization_id, hook=hook, address=linked.address
            )
            audit_record(
                org=hook.organization,
                actor=actor,
                event="notification_hook.confirm_recipient",
                target=hook,
                after={"address": linked.address},
            )
    except IntegrityError:  # the same link, confirmed a moment ago in another request
        pass
    return LinkedRecipient(hook, linked.address, confirmed=True)
