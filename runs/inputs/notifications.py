"""What a client may send to add a notification hook (``runs.services.notifications`` checks
the URL, the addresses and the events field by field)."""

from __future__ import annotations

from rest_framework import serializers

from runs.inputs.strict_fields import StrictCharField, StrictChoiceField, StrictListField
from runs.models import HookKind, NotificationEvent, NotificationHook
from runs.models.notifications import SENT_ON_REQUEST

# What a hook may ask to be told of: not what is sent to it on request (a test, a confirmation).
HOOK_EVENTS = [
    (value, label) for value, label in NotificationEvent.choices if value not in SENT_ON_REQUEST
]


class HookCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=NotificationHook._meta.get_field("name").max_length)
    kind = StrictChoiceField(choices=HookKind.choices)
    events = StrictListField(child=StrictChoiceField(choices=HOOK_EVENTS), max_length=16)
    url = StrictCharField(
        max_length=2000,
        required=False,
        default="",
        help_text="Webhook and Slack kinds; stored encrypted, only its host is shown again.",
    )
    email_to = StrictCharField(
        max_length=1000,
        required=False,
        default="",
        help_text="E-mail kind: addresses, comma-separated; each is mailed a link to confirm, "
        "and nothing else is sent to it until it does.",
    )
