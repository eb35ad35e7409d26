"""Runs of the organization's experiments, with trials and measurements (read-only here;
starting and cancelling runs arrive with the orchestration)."""

from __future__ import annotations

import django_filters
from django.db.models import Prefetch
from rest_framework import mixins

from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_runs import RunDetailSerializer, RunSerializer
from runs.models import Run, Trial


class RunFilter(django_filters.FilterSet):
    experiment = django_filters.UUIDFilter(field_name="experiment_id")

    class Meta:
        model = Run
        fields = ["experiment", "state", "trigger"]


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OrgScopedViewSet):
    """Runs, newest first; the detail carries every trial and its measurements."""

    model = Run
    filterset_class = RunFilter

    def get_serializer_class(self):
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    def get_queryset(self):
        queryset = super().get_queryset().select_related("started_by")
        if self.action == "retrieve":
            trials = Trial.objects.prefetch_related("measurements").order_by("index")
            queryset = queryset.prefetch_related(Prefetch("trials", queryset=trials))
        return queryset
