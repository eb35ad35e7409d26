from django.contrib.auth import views as auth_views
from django.urls import include, path

from frontend import views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.home, name="home"),
    path("o/<slug:org>/", views.org_overview, name="org-overview"),
    # One module per area of the site (each its own views, templates and static files).
    path("", include("frontend.urls_org")),
    path("", include("frontend.urls_experiments")),
    path("", include("frontend.urls_runs")),
    path("", include("frontend.urls_reports")),
]
