"""The signed-in person's own account page: the single sign-on identities linked to it, and
attaching one (``runs.sso``: an account attaches single sign-on only itself, signed in)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from runs.sso import SSO_ATTACH_SESSION_KEY, sso_enabled


@login_required
def account(request):
    identities = request.user.sso_identities.order_by("created_at")
    return render(
        request, "frontend/account.html", {"identities": identities, "sso": sso_enabled()}
    )


@login_required
@require_POST
def account_sso_attach(request):
    """The signed-in user confirms (a POST with its CSRF token) that the identity they sign
    in with at the issuer next is to be linked to this account; then off to the issuer."""
    if not sso_enabled():
        raise Http404("single sign-on is not configured")
    request.session[SSO_ATTACH_SESSION_KEY] = request.user.pk
    query = urlencode({"next": reverse("account")})
    return redirect(f"{reverse('oidc_authentication_init')}?{query}")
