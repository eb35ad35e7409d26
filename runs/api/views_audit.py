"""The organization's audit log: list with filters, and export as CSV or JSON lines.

Filters, order and row format are ``runs.selectors.audit_log``'s, shared with the web page."""

from __future__ import annotations

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.decorators import action

from runs.api.pagination import cursor_pagination
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_experiments import AuditEventSerializer
from runs.models import AuditEvent
from runs.selectors.audit_log import (
    EXPORT_FORMATS,
    TEXT_FILTERS,
    TIME_FILTERS,
    audit_export,
    audit_filter_parse,
    audit_log,
)

FILTER_PARAMETERS = [
    *(OpenApiParameter(name, str) for name in TEXT_FILTERS),
    *(
        OpenApiParameter(name, str, description="YYYY-MM-DD (a UTC day) or an ISO 8601 instant")
        for name in TIME_FILTERS
    ),
]


@extend_schema(parameters=FILTER_PARAMETERS)
class AuditEventViewSet(mixins.ListModelMixin, OrgScopedViewSet):
    """Append-only, hash-chained record of every change in the organization, newest first.
    Readable by every member; nobody can change it."""

    model = AuditEvent
    serializer_class = AuditEventSerializer
    filter_backends = []  # runs.selectors.audit_log parses the filters, for the web page too
    pagination_class = cursor_pagination("-seq")

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return AuditEvent.objects.none()
        query = audit_filter_parse(self.request.query_params)
        return audit_log(org=self.membership.organization, query=query)

    @extend_schema(
        parameters=[
            OpenApiParameter("as", str, enum=list(EXPORT_FORMATS), description="file format")
        ],
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "application/x-ndjson"): OpenApiTypes.STR,
        },
    )
    @action(detail=False, methods=["get"])
    def export(self, request, org):
        """The filtered log, oldest first (chain order), streamed as CSV or as JSON lines."""
        export = audit_export(
            org=self.org,
            query=audit_filter_parse(request.query_params),
            file_format=request.query_params.get("as", "csv"),
        )
        response = StreamingHttpResponse(export.chunks, content_type=export.content_type)
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response
