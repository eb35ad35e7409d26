"""Wire shapes of organizations, members and tokens."""

from __future__ import annotations

from rest_framework import serializers

from runs.api.strict_fields import StrictCharField, StrictChoiceField, StrictEmailField
from runs.models import ApiToken, Membership, Organization, Role, User

_EMAIL_MAX = User._meta.get_field("email").max_length


class OrganizationSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ["slug", "name", "created_at", "role"]

    def get_role(self, org) -> str:
        return self.context["roles"].get(org.id, "")


class MemberSerializer(serializers.ModelSerializer):
    email = serializers.EmailField(source="user.email", read_only=True)
    name = serializers.CharField(source="user.name", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "email", "name", "role", "created_at"]
        read_only_fields = ["id", "email", "name", "created_at"]


class MemberAddSerializer(serializers.Serializer):
    email = StrictEmailField(max_length=_EMAIL_MAX)
    role = StrictChoiceField(choices=Role.choices)


class MemberRoleSerializer(serializers.Serializer):
    role = StrictChoiceField(choices=Role.choices)


class TokenSerializer(serializers.ModelSerializer):
    user = serializers.EmailField(source="user.email", read_only=True)
    is_active = serializers.BooleanField(read_only=True)

    class Meta:
        model = ApiToken
        fields = [
            "id",
            "name",
            "prefix",
            "user",
            "created_at",
            "last_used_at",
            "revoked_at",
            "is_active",
        ]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=ApiToken._meta.get_field("name").max_length)
    user = StrictEmailField(
        max_length=_EMAIL_MAX,
        required=False,
        help_text="Member the token acts as; yourself when left out.",
    )


class IssuedTokenSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
