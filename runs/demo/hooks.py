"""The demo's notification hooks: a webhook to the demo's own receiver and an e-mail hook to
its mail sink (``runs.demo.inbox``), told of every event, so that the demo's run, a
promotion and a "Send test" land where the notifications page shows them.

Guarantees: ``demo_hooks_seed`` leaves the organization with exactly one hook of each name
below, made through ``hook_create`` (checked, audited, within the organization's limits);
the webhook points at this demo's receiver and the receiver checks its signatures. The
e-mail hook's address (alice's, the demo owner's) is confirmed through the link a
confirmation mail carries (``recipient_confirm``, audited): it is the demo's own mailbox.
"""

from __future__ import annotations

from runs.actors import Actor
from runs.demo.inbox import Inbox
from runs.inputs.notifications import HOOK_EVENTS
from runs.models import HookKind, NotificationHook, Organization
from runs.services.hook_recipients import confirmation_token, recipient_confirm
from runs.services.notifications.hooks import hook_create, hook_delete

WEBHOOK_NAME = "Demo receiver"
EMAIL_NAME = "Demo mail sink"
EMAIL_TO = "alice@demo.example"


def demo_hooks_seed(*, org: Organization, inbox: Inbox, actor: Actor) -> None:
    """The demo's webhook and e-mail hook in ``org``; ``inbox`` learns the webhook's secret."""
    events = [value for value, _label in HOOK_EVENTS]
    # A receiver listens on a new port each time the demo starts, with a secret it must be
    # told: the previous demo's webhook is replaced rather than edited.
    for old in NotificationHook.objects.filter(organization=org, name=WEBHOOK_NAME):
        hook_delete(hook=old, actor=actor)
    created = hook_create(
        org=org,
        actor=actor,
        name=WEBHOOK_NAME,
        kind=HookKind.WEBHOOK,
        events=events,
        url=f"{inbox.url}benchsite",
    )
    inbox.secret = created.secret
    if not NotificationHook.objects.filter(organization=org, name=EMAIL_NAME).exists():
        mail = hook_create(
            org=org,
            actor=actor,
            name=EMAIL_NAME,
            kind=HookKind.EMAIL,
            events=events,
            email_to=EMAIL_TO,
        ).hook
        recipient_confirm(token=confirmation_token(mail, EMAIL_TO), actor=actor)
