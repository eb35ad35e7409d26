"""The organization's audit log: list with filters, and export as CSV or JSON lines."""

from __future__ import annotations

import csv
import io
import json

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError

from runs.api.filters import AuditEventFilter
from runs.api.pagination import cursor_pagination
from runs.api.scoping import OrgScopedViewSet
from runs.api.serializers_experiments import AuditEventSerializer
from runs.models import AuditEvent
from runs.selectors import audit_events

EXPORT_COLUMNS = AuditEventSerializer.Meta.fields


class AuditEventViewSet(mixins.ListModelMixin, OrgScopedViewSet):
    """Append-only, hash-chained record of every change in the organization. Readable by
    every member; nobody can change it."""

    model = AuditEvent
    serializer_class = AuditEventSerializer
    filterset_class = AuditEventFilter
    pagination_class = cursor_pagination("-seq")

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):
            return AuditEvent.objects.none()
        return audit_events(org=self.membership.organization)

    @extend_schema(
        parameters=[OpenApiParameter("as", str, enum=["csv", "json"], description="file format")],
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            (200, "application/x-ndjson"): OpenApiTypes.STR,
        },
    )
    @action(detail=False, methods=["get"])
    def export(self, request, org):
        """The filtered log, oldest first, streamed as CSV or as JSON lines."""
        file_format = request.query_params.get("as", "csv")
        if file_format not in {"csv", "json"}:
            raise ValidationError({"as": ["Expected 'csv' or 'json'."]})
        events = self.filter_queryset(self.get_queryset()).order_by("seq")
        rows = (AuditEventSerializer(event).data for event in events.iterator(chunk_size=500))
        name = f"audit-{self.org.slug}.{'csv' if file_format == 'csv' else 'jsonl'}"
        if file_format == "csv":
            body, content_type = _csv_lines(rows), "text/csv"
        else:
            body = (json.dumps(row, default=str) + "\n" for row in rows)
            content_type = "application/x-ndjson"
        response = StreamingHttpResponse(body, content_type=content_type)
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response


def _csv_lines(rows):
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()}
        )
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue()
