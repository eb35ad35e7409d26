"""Response shapes of organizations, members and tokens (their inputs: runs.inputs)."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import ApiToken, Membership, Organization


class OrganizationSerializer(serializers.ModelSerializer):
    role = serializers.SerializerMethodField()

    class Meta:
        model = Organization
        fields = ["slug", "name", "created_at", "role", "sandbox"]
        read_only_fields = fields

    def get_role(self, org) -> str:
        return self.context["roles"].get(org.id, "")


class MemberSerializer(serializers.ModelSerializer):
    email = serializers.EmailField(source="user.email", read_only=True)
    name = serializers.CharField(source="user.name", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "email", "name", "role", "created_at"]
        read_only_fields = ["id", "email", "name", "created_at"]


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


class IssuedTokenSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="Shown once; store it now.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
