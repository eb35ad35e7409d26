from django.contrib.auth import views as auth_views
from django.urls import include, path

from frontend import account, notification_recipients, views
from frontend.sign_in import SignInView

urlpatterns = [
    path("login/", SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.home, name="home"),
    path("account/", account.account, name="account"),
    path("account/sso/attach/", account.account_sso_attach, name="account-sso-attach"),
    path("o/<slug:org>/", views.org_overview, name="org-overview"),
    # A confirmation mail's link: no sign-in (runs.services.hook_recipients).
    path(
        "notifications/confirm/<str:token>/",
        notification_recipients.notification_recipient_confirm,
        name="notification-recipient-confirm",
    ),
    # One package per area of the site: its views, URLs and forms, its templates under
    # templates/frontend/<area>/ and its static files under static/frontend/<area>/.
    path("", include("frontend.org.urls")),
    path("", include("frontend.experiments.urls")),
    path("", include("frontend.runs.urls")),
    path("", include("frontend.reports.urls")),
    path("", include("frontend.promotions.urls")),
    path("", include("frontend.audit.urls")),
]
