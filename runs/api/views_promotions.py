"""Promotions, read-only: what each experiment runs in production (``?state=approved``),
for CI and the CLI to compare against. Proposing and deciding happen in the web UI."""

from __future__ import annotations

import django_filters
from rest_framework import mixins

from runs.api.pagination import cursor_pagination
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_promotions import PromotionSerializer
from runs.models import Promotion


class PromotionFilter(django_filters.FilterSet):
    experiment = django_filters.UUIDFilter(field_name="experiment_id")

    class Meta:
        model = Promotion
        fields = ["experiment", "state"]


class PromotionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """The organization's promotions, newest first. At most one per experiment is
    ``approved``: ``?state=approved&experiment=<id>`` is its production config."""

    model = Promotion
    serializer_class = PromotionSerializer
    filterset_class = PromotionFilter
    pagination_class = cursor_pagination("-proposed_at", "-id")

    def get_queryset(self):
        return (
            super()
            .get_queryset()
            .select_related("experiment", "trial", "proposed_by", "decided_by")
        )
