"""Organization settings: notification hooks (webhooks, Slack, e-mail), their delivery log and
a "send test" per hook. Owners and admins only, as the API tokens: a hook decides where the
organization's news goes. An e-mail hook's addresses that have not confirmed it are marked.
Nothing secret is rendered but a new webhook's signing secret, once, in the answer to the
request that made it. In the demo, what its local webhook receiver and mail sink were sent
is shown too (``runs.selectors.demo_inbox``)."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache

from frontend.org_pages import org_context, org_page
from frontend.validation import error_summary
from runs.access import Need, access_notification_hook, scoped
from runs.actors import actor_from_request
from runs.errors import Conflict, DomainValidationError, RateLimited
from runs.inputs.notifications import HOOK_EVENTS
from runs.models import HookKind, NotificationDelivery, NotificationHook
from runs.selectors.demo_inbox import demo_inbox
from runs.selectors.hook_recipients import hook_addresses
from runs.services.notifications.hooks import hook_create, hook_delete, hook_send_test

_LABELS = {
    "name": "Name",
    "kind": "Kind",
    "url": "URL",
    "email_to": "E-mail to",
    "events": "Events",
}
# Where the summary lists what no one field is at fault for (the organization is full).
_WHOLE_FORM = "hook"
DELIVERY_LOG_ROWS = 50


@never_cache  # the answer that holds a new secret is never kept by a cache
@org_page("GET", "POST", need=Need.MANAGE)
def org_notifications(request, membership):
    errors: dict[str, list[str]] = {}
    created = None
    if request.method == "POST":
        try:
            created = hook_create(
                org=membership.organization,
                actor=actor_from_request(request),
                name=request.POST.get("name", ""),
                kind=request.POST.get("kind", ""),
                events=request.POST.getlist("events"),
                url=request.POST.get("url", ""),
                email_to=request.POST.get("email_to", ""),
            )
        except DomainValidationError as exc:
            errors = exc.fields
        except (Conflict, RateLimited) as exc:
            errors = {_WHOLE_FORM: [str(exc)]}
    deliveries = (
        scoped(membership, NotificationDelivery)
        .select_related("hook", "notification")
        .order_by("-created_at")[:DELIVERY_LOG_ROWS]
    )
    context = org_context(
        membership,
        section="notifications",
        hooks=[
            (hook, hook_addresses(hook))
            for hook in scoped(membership, NotificationHook).order_by("name")
        ],
        deliveries=deliveries,
        created=created,
        errors=errors,
        summary=error_summary(errors, _LABELS),
        values=request.POST if errors else {},
        chosen_events=request.POST.getlist("events") if errors else [],
        kinds=HookKind.choices,
        events=HOOK_EVENTS,
        inbox=demo_inbox(org=membership.organization),
    )
    return render(request, "frontend/org/notifications.html", context)


@org_page("POST", need=Need.MANAGE)
def org_notification_test(request, membership, hook_id):
    hook = access_notification_hook(membership=membership, hook_id=hook_id)
    try:
        hook_send_test(hook=hook, actor=actor_from_request(request))
    except RateLimited as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Sent a test to “{hook.name}”: see the delivery log below.")
    return redirect("org-notifications", membership.organization.slug)


@org_page("POST", need=Need.MANAGE)
def org_notification_delete(request, membership, hook_id):
    hook = access_notification_hook(membership=membership, hook_id=hook_id)
    hook_delete(hook=hook, actor=actor_from_request(request))
    messages.success(request, f"Deleted the hook “{hook.name}”.")
    return redirect("org-notifications", membership.organization.slug)
