"""The sign-in page: single sign-on when the deployment has an issuer, the password form
unless ``BENCHSITE_PASSWORD_LOGIN`` turns it off (``runs.sso``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import Http404
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from runs.sso import sso_enabled


class SignInView(auth_views.LoginView):
    def get_context_data(self, **kwargs):
        return super().get_context_data(**kwargs) | {
            "sso": sso_enabled(),
            "password_login": settings.BENCHSITE_PASSWORD_LOGIN,
        }


class SsoStartView(OIDCAuthenticationRequestView):
    """The redirect to the issuer; not found while SSO is off."""

    def get(self, request):
        if not sso_enabled():
            raise Http404("single sign-on is not configured")
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """The issuer's redirect back; not found while SSO is off."""

    def get(self, request):
        if not sso_enabled():
            raise Http404("single sign-on is not configured")
        return super().get(request)
