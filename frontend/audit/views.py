"""The audit log viewer: the organization's events, filtered, paged, exported as CSV, with
the state of its hash chain.

An ``org_page`` that every member may read. Filtering, order and the export's rows are
``runs.selectors.audit_log``'s, the same as the API's; a bad filter is named on its field
(400) and the page then shows the unfiltered log.
"""

from __future__ import annotations

import json

from django.core.paginator import Paginator
from django.http import StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse

from frontend.org_pages import org_context, org_page
from runs.audit import audit_chain_check
from runs.errors import DomainValidationError
from runs.models import AuditEvent
from runs.selectors.audit_log import AuditFilter, audit_export, audit_filter_parse
from runs.selectors.audit_log import audit_log as audit_log_events

AUDIT_PAGE_SIZE = 50


@org_page()
def audit_log(request, membership):
    organization = membership.organization
    errors: dict[str, str] = {}
    try:
        audit_query = audit_filter_parse(request.GET)
    except DomainValidationError as refusal:
        errors = {field: " ".join(messages) for field, messages in refusal.fields.items()}
        audit_query = AuditFilter()
    if request.GET.get("format") == "csv" and not errors:
        export = audit_export(org=organization, query=audit_query, file_format="csv")
        response = StreamingHttpResponse(export.chunks, content_type=export.content_type)
        response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
        return response
    events = audit_log_events(org=organization, query=audit_query)
    page = Paginator(events, AUDIT_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("format", None)
    # Verified from the checkpoint on; older events by the periodic full verification, whose
    # break is shown here too (runs.audit says what this does and does not prove).
    chain = audit_chain_check(org=organization)
    rows = [
        {
            "event": event,
            "changes": _changes_text(event),
            "href": _audit_target_href(organization.slug, event),
        }
        for event in page.object_list
    ]
    context = org_context(
        membership,
        page=page,
        rows=rows,
        errors=errors,
        values={k: request.GET.get(k, "") for k in ("event", "actor", "target", "since", "until")},
        query=query.urlencode(),
        chain_break=chain.chain_break,
        chain_status=chain,
        chain_length=AuditEvent.objects.filter(organization=organization).count(),
        event_names=AuditEvent.objects.filter(organization=organization)
        .order_by("event")
        .values_list("event", flat=True)
        .distinct(),
    )
    return render(request, "frontend/audit/log.html", context, status=400 if errors else 200)


def _short(value) -> str:
    # A summary for the table; the CSV export carries the whole before/after.
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


def _changes_text(event: AuditEvent, shown: int = 6) -> str:
    after = event.after or {}
    before = event.before or {}
    keys = [k for k in dict.fromkeys([*before, *after]) if k != "id"]
    parts = []
    for key in keys[:shown]:
        if key in before and key in after:
            parts.append(f"{key}: {_short(before[key])} → {_short(after[key])}")
        elif key in after:
            parts.append(f"{key}: {_short(after[key])}")
        else:
            parts.append(f"{key}: {_short(before[key])} (removed)")
    if len(keys) > shown:
        parts.append(f"… {len(keys) - shown} more (in the CSV)")
    return "; ".join(parts)


def _audit_target_href(org_slug: str, event: AuditEvent) -> str | None:
    if event.target_type == "promotion":
        return reverse("promotion-detail", args=[org_slug, event.target_id])
    if event.target_type == "run":
        return reverse("run-detail", args=[org_slug, event.target_id])
    return None
