"""The managers' reports as data: what the report pages show, for scripts and dashboards."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.response import Response

from runs.api.scoping import OrgScopedViewSet
from runs.selectors.models_report import models_report, models_report_json


class ReportViewSet(OrgScopedViewSet):
    """Reports of the organization (read-only; every member may read them)."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    @action(detail=False, methods=["get"])
    def models(self, request, org):
        """Each model's cheapest configuration against its size (the Pareto front) and its
        quality against its cost at the SLOs, per evaluation (docs/quality.md); the
        configurations excluded for quality by their run's floor, with the reason."""
        return Response(models_report_json(models_report(org=self.org)))
