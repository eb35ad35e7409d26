"""Organizations the caller belongs to, their members and API tokens."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from runs.access import (
    Need,
    access_member,
    access_token,
    principal_from_request,
    principal_memberships,
)
from runs.api.pagination import cursor_pagination
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_tenancy import (
    IssuedTokenSerializer,
    MemberSerializer,
    OrganizationSerializer,
    TokenSerializer,
)
from runs.inputs.tenancy import MemberAddSerializer, MemberRoleSerializer, TokenCreateSerializer
from runs.models import ApiToken, Membership, Organization
from runs.services.tenancy import (
    membership_add_by_email,
    membership_change_role,
    membership_remove,
    token_acts_as,
    token_create,
    token_revoke,
)


class OrganizationViewSet(viewsets.ReadOnlyModelViewSet):
    """The organizations the caller belongs to (just one when calling with a token)."""

    serializer_class = OrganizationSerializer
    lookup_field = "slug"
    lookup_url_kwarg = "org"
    pagination_class = cursor_pagination("slug")

    def _memberships(self):
        return principal_memberships(principal_from_request(self.request))

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return Organization.objects.none()
        return Organization.objects.filter(
            id__in=self._memberships().values("organization_id")
        ).order_by("slug")

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if not getattr(self, "swagger_fake_view", False):
            context["roles"] = {m.organization_id: m.role for m in self._memberships()}
        return context


class MemberViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, OrgScopedViewSet
):
    """Members and roles. Anyone in the organization may list; owners and admins manage."""

    model = Membership
    serializer_class = MemberSerializer
    write_need = Need.MANAGE
    pagination_class = cursor_pagination("created_at", "pk")

    def get_queryset(self):
        return super().get_queryset().select_related("user")

    @extend_schema(request=MemberAddSerializer, responses={201: MemberSerializer})
    def create(self, request, org):
        data = MemberAddSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = membership_add_by_email(
            org=self.org,
            email=data.validated_data["email"],
            role=data.validated_data["role"],
            actor=self.actor,
        )
        return Response(MemberSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=MemberRoleSerializer, responses=MemberSerializer)
    def partial_update(self, request, org, pk):
        data = MemberRoleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = access_member(membership=self.membership, member_id=pk)
        membership = membership_change_role(
            membership=membership, role=data.validated_data["role"], actor=self.actor
        )
        return Response(MemberSerializer(membership).data)

    def destroy(self, request, org, pk):
        membership = access_member(membership=self.membership, member_id=pk)
        membership_remove(membership=membership, actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """API tokens of the organization. Owners and admins only; a token is shown once."""

    model = ApiToken
    serializer_class = TokenSerializer
    read_need = Need.MANAGE
    write_need = Need.MANAGE

    def get_queryset(self):
        return super().get_queryset().select_related("user")

    @extend_schema(request=TokenCreateSerializer, responses={201: IssuedTokenSerializer})
    def create(self, request, org):
        data = TokenCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = token_acts_as(
            org=self.org, email=data.validated_data.get("user"), caller=self.membership.user
        )
        issued = token_create(
            org=self.org, user=user, name=data.validated_data["name"], actor=self.actor
        )
        body = IssuedTokenSerializer(issued.token).data | {"token": issued.raw}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=TokenSerializer)
    def destroy(self, request, org, pk):
        """Revokes the token (it stays listed, marked revoked)."""
        token = token_revoke(
            token=access_token(membership=self.membership, token_id=pk), actor=self.actor
        )
        return Response(TokenSerializer(token).data)
