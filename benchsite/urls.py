"""Top-level routes: the web UI, the REST API, the admin and a health probe."""

from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path

from agents import protocol
from runs.api.errors import json_not_found, json_server_error


def healthz(request):
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    # Single sign-on's redirect to the issuer and its callback (runs/sso.py).
    path("oidc/", include("mozilla_django_oidc.urls")),
    # The agent reaches the API at the base the protocol names (agents.protocol.agent_site_urls).
    path(protocol.API_BASE_ROUTE, include("runs.api.urls")),
    path("", include("frontend.urls")),
]


def handler404(request, exception=None):
    if request.path.startswith("/api/"):
        return json_not_found(request, exception)
    from django.views.defaults import page_not_found

    return page_not_found(request, exception)


def handler500(request):
    if request.path.startswith("/api/"):
        return json_server_error(request)
    from django.views.defaults import server_error

    return server_error(request)
