"""Existing endpoints of the organization over the API: list, read, add (checked by asking the
endpoint), change (a new key or price, say), delete. Everyone reads them (the builder names
one); owners and admins add, change and delete them, as they hold an API key. The key is
never in an answer, only its fingerprint."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from runs.access import Need, access_endpoint
from runs.api.scoping import OrgScopedViewSet
from runs.inputs.endpoints import EndpointCreateSerializer
from runs.models import Endpoint
from runs.services.endpoints import endpoint_create, endpoint_delete, endpoint_update


class EndpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Endpoint
        fields = [
            "id",
            "name",
            "base_url",
            "served_model_name",
            "api_key_fingerprint",
            "price_usd_per_hour",
            "price_usd_per_1m_input_tokens",
            "price_usd_per_1m_output_tokens",
            "created_at",
        ]
        read_only_fields = fields


class EndpointViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """OpenAI-compatible deployments that experiments benchmark without renting
    (docs/operating.md, "Existing endpoints")."""

    model = Endpoint
    serializer_class = EndpointSerializer
    write_need = Need.MANAGE

    @extend_schema(request=EndpointCreateSerializer, responses={201: EndpointSerializer})
    def create(self, request, org):
        data = EndpointCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        endpoint = endpoint_create(org=self.org, actor=self.actor, **data.validated_data)
        return Response(EndpointSerializer(endpoint).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=EndpointCreateSerializer, responses={200: EndpointSerializer})
    def partial_update(self, request, org, pk):
        """Changes what the body names, by the rules of adding one; giving any price replaces
        all three (one left out is none); ``"api_key": ""`` removes the key."""
        endpoint = access_endpoint(membership=self.membership, endpoint_id=pk)
        data = EndpointCreateSerializer(data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        endpoint = endpoint_update(endpoint=endpoint, actor=self.actor, **data.validated_data)
        return Response(EndpointSerializer(endpoint).data)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, org, pk):
        endpoint_delete(
            endpoint=access_endpoint(membership=self.membership, endpoint_id=pk), actor=self.actor
        )
        return Response(status=status.HTTP_204_NO_CONTENT)
