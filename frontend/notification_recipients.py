"""The page a confirmation mail links to: an address of an e-mail hook agrees to receive its
notifications (``runs.services.hook_recipients``). It needs no sign-in; opening it changes
nothing (mail scanners open links), and its button confirms that address of that hook only."""

from __future__ import annotations

from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from runs.actors import Actor
from runs.services.hook_recipients import LINK_DAYS, recipient_confirm, recipient_from_link

TEMPLATE = "frontend/notification_recipient.html"


@never_cache
@require_http_methods(["GET", "POST"])
def notification_recipient_confirm(request, token: str):
    if request.method == "POST":
        actor = Actor(
            user=None, via="e-mail confirmation link", ip=request.META.get("REMOTE_ADDR") or None
        )
        linked = recipient_confirm(token=token, actor=actor)
    else:
        linked = recipient_from_link(token)
    if linked is None:
        return render(request, TEMPLATE, {"linked": None, "link_days": LINK_DAYS}, status=404)
    return render(request, TEMPLATE, {"linked": linked})
