"""Registered models, the GPU catalogue and the organization's GPU prices."""

from __future__ import annotations

import functools

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from agents.protocol import serve_flags_json_schema
from runs.access import Need, access_model_spec
from runs.api.filters import ModelSpecFilter
from runs.api.pagination import cursor_pagination
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_catalogue import GpuTypeSerializer
from runs.inputs.catalogue import GpuPriceSerializer, ModelSpecSerializer
from runs.models import GpuPriceOverride, GpuType, ModelSpec
from runs.services.catalogue import (
    gpu_price_clear,
    gpu_price_set,
    model_spec_create,
    model_spec_delete,
    model_spec_update,
)
from runs.services.hub_config import hf_config_fetch


class ModelSpecViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Models registered by the organization, with their derived KV-cache bytes per token. A
    model is stated by its columns or by its config.json: given (``hf_config``) or read from
    the hub with the organization's token (``hf_config_from_hub``)."""

    model = ModelSpec
    serializer_class = ModelSpecSerializer
    filterset_class = ModelSpecFilter
    pagination_class = cursor_pagination("created_at", "pk")

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if context["membership"] is not None:
            context["hf_config_fetch"] = functools.partial(hf_config_fetch, org=self.org)
        return context

    def create(self, request, org):
        data = self.get_serializer(data=request.data)
        data.is_valid(raise_exception=True)
        model = model_spec_create(org=self.org, actor=self.actor, **data.validated_data)
        return Response(self.get_serializer(model).data, status=status.HTTP_201_CREATED)

    def update(self, request, org, pk, partial=False):
        model = access_model_spec(membership=self.membership, model_id=pk)
        data = self.get_serializer(model, data=request.data, partial=partial)
        data.is_valid(raise_exception=True)
        model = model_spec_update(model=model, actor=self.actor, **data.validated_data)
        return Response(self.get_serializer(model).data)

    def partial_update(self, request, org, pk):
        return self.update(request, org, pk, partial=True)

    def destroy(self, request, org, pk):
        model_spec_delete(
            model=access_model_spec(membership=self.membership, model_id=pk), actor=self.actor
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class GpuTypeViewSet(OrgScopedViewSet, mixins.ListModelMixin, mixins.RetrieveModelMixin):
    """The GPU catalogue with list prices (and their source), beside the organization's own
    prices. Owners and admins set or clear the organization's price."""

    model = GpuType
    serializer_class = GpuTypeSerializer
    write_need = Need.MANAGE
    pagination_class = cursor_pagination("id")
    lookup_value_regex = r"[^/\x00]+"  # provider ids contain spaces, never slashes or NUL

    def get_queryset(self):
        return GpuType.objects.all()  # the catalogue is shared; prices below are per tenant

    def get_serializer_context(self):
        context = super().get_serializer_context()
        if getattr(self, "membership", None) is not None:
            overrides = GpuPriceOverride.objects.filter(
                organization_id=self.membership.organization_id
            )
            context["overrides"] = {o.gpu_type_id: o for o in overrides}
        return context

    @extend_schema(request=GpuPriceSerializer, responses=GpuTypeSerializer, methods=["PUT"])
    @extend_schema(request=None, responses=GpuTypeSerializer, methods=["DELETE"])
    @action(detail=True, methods=["put", "delete"])
    def price(self, request, org, pk):
        gpu_type = self.get_object()
        if request.method == "DELETE":
            gpu_price_clear(org=self.org, gpu_type=gpu_type, actor=self.actor)
        else:
            data = GpuPriceSerializer(data=request.data)
            data.is_valid(raise_exception=True)
            gpu_price_set(org=self.org, gpu_type=gpu_type, actor=self.actor, **data.validated_data)
        return Response(self.get_serializer(gpu_type).data)


class ServeFlagsView(viewsets.ViewSet):
    """The versioned schema of vLLM serve flags an experiment's grid may use."""

    @extend_schema(responses=dict)
    def list(self, request):
        return Response(serve_flags_json_schema(max_trials=settings.BENCHSITE_MAX_GRID_TRIALS))
