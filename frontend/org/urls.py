"""Organization settings: members and roles, API tokens, budgets, the Runpod key,
notifications, existing endpoints."""

from django.urls import path

from frontend.org import endpoints, notifications, views

urlpatterns = [
    path("o/<slug:org>/settings/", views.org_settings, name="org-settings"),
    path("o/<slug:org>/settings/members/", views.org_members, name="org-members"),
    path(
        "o/<slug:org>/settings/members/<int:member_id>/role/",
        views.org_member_role,
        name="org-member-role",
    ),
    path(
        "o/<slug:org>/settings/members/<int:member_id>/remove/",
        views.org_member_remove,
        name="org-member-remove",
    ),
    path("o/<slug:org>/settings/tokens/", views.org_tokens, name="org-tokens"),
    path(
        "o/<slug:org>/settings/tokens/<uuid:token_id>/revoke/",
        views.org_token_revoke,
        name="org-token-revoke",
    ),
    path("o/<slug:org>/settings/budgets/", views.org_budgets, name="org-budgets"),
    path(
        "o/<slug:org>/settings/budgets/<int:budget_id>/delete/",
        views.org_budget_delete,
        name="org-budget-delete",
    ),
    path("o/<slug:org>/settings/runpod-key/", views.org_runpod_key, name="org-runpod-key"),
    path(
        "o/<slug:org>/settings/runpod-key/remove/",
        views.org_runpod_key_remove,
        name="org-runpod-key-remove",
    ),
    path(
        "o/<slug:org>/settings/notifications/",
        notifications.org_notifications,
        name="org-notifications",
    ),
    path(
        "o/<slug:org>/settings/notifications/<uuid:hook_id>/test/",
        notifications.org_notification_test,
        name="org-notification-test",
    ),
    path(
        "o/<slug:org>/settings/notifications/<uuid:hook_id>/delete/",
        notifications.org_notification_delete,
        name="org-notification-delete",
    ),
    path("o/<slug:org>/settings/endpoints/", endpoints.org_endpoints, name="org-endpoints"),
    path(
        "o/<slug:org>/settings/endpoints/<uuid:endpoint_id>/delete/",
        endpoints.org_endpoint_delete,
        name="org-endpoint-delete",
    ),
    path(
        "o/<slug:org>/settings/endpoints/<uuid:endpoint_id>/key/",
        endpoints.org_endpoint_key,
        name="org-endpoint-key",
    ),
    path("o/<slug:org>/settings/hf-token/", views.org_hf_token, name="org-hf-token"),
    path(
        "o/<slug:org>/settings/hf-token/remove/",
        views.org_hf_token_remove,
        name="org-hf-token-remove",
    ),
]
