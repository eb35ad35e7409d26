"""The organization's provider API keys: owners and admins set, inspect and clear them.

The key goes in once (PUT) and never comes out: every answer carries only its fingerprint.
"""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import serializers, status
from rest_framework.response import Response

from runs.access import Need, scoped
from runs.api.scoping import OrgScopedViewSet
from runs.inputs.credentials import ProviderKeySetSerializer
from runs.models import CredentialProvider, ProviderCredential
from runs.services.credentials import provider_key_clear, provider_key_set


class ProviderKeySerializer(serializers.ModelSerializer):
    class Meta:
        model = ProviderCredential
        fields = ["provider", "fingerprint", "updated_at"]
        read_only_fields = fields


_PROVIDER = OpenApiParameter(
    "provider",
    str,
    OpenApiParameter.PATH,
    enum=CredentialProvider.values,
    description="The provider whose key this is.",
)


@extend_schema_view(
    retrieve=extend_schema(parameters=[_PROVIDER], responses=ProviderKeySerializer),
    update=extend_schema(
        parameters=[_PROVIDER], request=ProviderKeySetSerializer, responses=ProviderKeySerializer
    ),
    destroy=extend_schema(parameters=[_PROVIDER], request=None, responses={204: None}),
)
class ProviderKeyViewSet(OrgScopedViewSet):
    """One key per provider. Only owners and admins see even the fingerprint; 404 when the
    organization has no key for the provider (or the provider is unknown)."""

    model = ProviderCredential
    serializer_class = ProviderKeySerializer
    read_need = Need.MANAGE
    write_need = Need.MANAGE
    # The URL names the provider ("runpod"), not a row: one key per provider.
    lookup_url_kwarg = "provider"

    def _provider(self, name: str) -> CredentialProvider:
        if name not in CredentialProvider.values:
            raise Http404
        return CredentialProvider(name)

    def retrieve(self, request, org, provider):
        provider = self._provider(provider)
        credential = scoped(self.membership, ProviderCredential).filter(provider=provider).first()
        if credential is None:
            raise Http404
        return Response(ProviderKeySerializer(credential).data)

    def update(self, request, org, provider):
        provider = self._provider(provider)
        data = ProviderKeySetSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        credential = provider_key_set(
            actor=self.actor, org=self.org, provider=provider, **data.validated_data
        )
        return Response(ProviderKeySerializer(credential).data)

    def destroy(self, request, org, provider):
        provider_key_clear(actor=self.actor, org=self.org, provider=self._provider(provider))
        return Response(status=status.HTTP_204_NO_CONTENT)
