"""Organization settings: existing endpoints (OpenAI-compatible deployments benchmarked
without renting). Everyone sees them; owners and admins add them, replace their key and
delete them, as they hold an API key. The key is never rendered: only its last four
characters."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render

from frontend.org_pages import org_context, org_page
from frontend.validation import error_summary, parse_as_api
from runs.access import Need, access_endpoint, scoped
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError
from runs.inputs.endpoints import EndpointCreateSerializer
from runs.models import Endpoint
from runs.services.endpoints import endpoint_create, endpoint_delete, endpoint_update

_LABELS = {
    "name": "Name",
    "base_url": "Base URL",
    "served_model_name": "Served model name",
    "api_key": "API key",
    "price_usd_per_hour": "$ per hour",
    "price_usd_per_1m_input_tokens": "$ per 1M input tokens",
    "price_usd_per_1m_output_tokens": "$ per 1M output tokens",
}


def _form_data(form) -> dict[str, str]:
    """The form as the API's input: an empty price box means no price, as leaving the field
    out does in the API."""
    return {key: value for key, value in form.items() if key in _LABELS and value.strip() != ""}


@org_page("GET", "POST", post=Need.MANAGE)
def org_endpoints(request, membership):
    errors: dict[str, list[str]] = {}
    if request.method == "POST":
        try:
            data = parse_as_api(EndpointCreateSerializer, _form_data(request.POST))
            endpoint = endpoint_create(
                org=membership.organization, actor=actor_from_request(request), **data
            )
        except DomainValidationError as exc:
            errors = exc.fields
        else:
            messages.success(request, f"Added the endpoint “{endpoint.name}”.")
            return redirect("org-endpoints", membership.organization.slug)
    # The key is never sent back into the form, not even after a refusal.
    values = {key: value for key, value in request.POST.items() if key != "api_key"}
    context = org_context(
        membership,
        section="endpoints",
        endpoints=scoped(membership, Endpoint).order_by("name"),
        errors=errors,
        summary=error_summary(errors, _LABELS),
        values=values if errors else {},
    )
    return render(request, "frontend/org/endpoints.html", context)


@org_page("POST", need=Need.MANAGE)
def org_endpoint_delete(request, membership, endpoint_id):
    endpoint = access_endpoint(membership=membership, endpoint_id=endpoint_id)
    try:
        endpoint_delete(endpoint=endpoint, actor=actor_from_request(request))
    except Conflict as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Deleted the endpoint “{endpoint.name}”.")
    return redirect("org-endpoints", membership.organization.slug)


@org_page("POST", need=Need.MANAGE)
def org_endpoint_key(request, membership, endpoint_id):
    """A rotated key: checked with the endpoint (as the API's change is) before it replaces
    the old one; refused, the old key stays and the page says why."""
    endpoint = access_endpoint(membership=membership, endpoint_id=endpoint_id)
    key = request.POST.get("api_key", "").strip()
    if not key:  # an empty box is no key to check (the API removes a key with "")
        messages.error(request, f"{endpoint.name}: give the new API key to replace the old one.")
        return redirect("org-endpoints", membership.organization.slug)
    try:
        data = parse_as_api(EndpointCreateSerializer, {"api_key": key}, partial=True)
        endpoint_update(endpoint=endpoint, actor=actor_from_request(request), **data)
    except DomainValidationError as exc:
        problems = " ".join(message for messages_ in exc.fields.values() for message in messages_)
        messages.error(request, f"{endpoint.name}: the key was not replaced. {problems}")
    else:
        messages.success(request, f"Replaced the API key of “{endpoint.name}”.")
    return redirect("org-endpoints", membership.organization.slug)
