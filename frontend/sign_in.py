"""The sign-in page: single sign-on when the deployment has an issuer, the password form
unless ``BENCHSITE_PASSWORD_LOGIN`` turns it off (``runs.sso``)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from runs.sso import SSO_REFUSAL_SESSION_KEY, SsoRefusal, sso_enabled

# What each refusal of single sign-on tells the person (the sign-in page's ``?sso=``).
SSO_REFUSALS = {
    SsoRefusal.UNVERIFIED: "Single sign-on did not sign you in: the issuer must confirm your "
    "e-mail address (email_verified), and the sign-in must be completed within a few minutes. "
    "Try again, or ask an administrator.",
    SsoRefusal.EXISTING_ACCOUNT: "Single sign-on did not sign you in: an account with this "
    "e-mail address exists already. Sign in to it with its password first, then attach "
    "single sign-on from your account page.",
    SsoRefusal.UNMAPPED_DOMAIN: "Single sign-on did not sign you in: it creates accounts only "
    "for e-mail domains this deployment maps to an organization. Ask an administrator to "
    "invite you.",
    SsoRefusal.ATTACHED_ELSEWHERE: "That single sign-on identity is attached to another account.",
}


class SignInView(auth_views.LoginView):
    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs) | {
            "sso": sso_enabled(),
            "sso_refusal": SSO_REFUSALS.get(self.request.GET.get("sso", "")),
            "password_login": settings.BENCHSITE_PASSWORD_LOGIN,
        }


class SsoStartView(OIDCAuthenticationRequestView):
    """The redirect to the issuer; not found while SSO is off."""

    def get(self, request):
        if not sso_enabled():
            raise Http404("single sign-on is not configured")
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """The issuer's redirect back; not found while SSO is off. An answer that signs nobody
    in goes back to the sign-in page saying why, or, for a signed-in person attaching single
    sign-on, to their account page."""

    def login_failure(self):
        refusal = self.request.session.pop(SSO_REFUSAL_SESSION_KEY, SsoRefusal.UNVERIFIED)
        if self.request.user.is_authenticated:
            messages.error(self.request, SSO_REFUSALS[SsoRefusal(refusal)])
            return redirect("account")
        return HttpResponseRedirect(f"{reverse('login')}?{urlencode({'sso': refusal})}")

    def get(self, request):
        if not sso_enabled():
            raise Http404("single sign-on is not configured")
        return super().get(request)
