"""What a client may send to add a member, change a role or create a token."""

from __future__ import annotations

from rest_framework import serializers

from runs.inputs.strict_fields import StrictCharField, StrictChoiceField, StrictEmailField
from runs.models import ApiToken, Role, User

_EMAIL_MAX = User._meta.get_field("email").max_length


class MemberAddSerializer(serializers.Serializer):
    email = StrictEmailField(max_length=_EMAIL_MAX)
    role = StrictChoiceField(choices=Role.choices)


class MemberRoleSerializer(serializers.Serializer):
    role = StrictChoiceField(choices=Role.choices)


class TokenCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=ApiToken._meta.get_field("name").max_length)
    user = StrictEmailField(
        max_length=_EMAIL_MAX,
        required=False,
        help_text="Member the token acts as; yourself when left out.",
    )
