"""Reports for managers, promotion with approval, the audit log viewer."""

from django.urls import path

from frontend import views_reports as views

urlpatterns = [
    path("o/<slug:org>/reports/", views.reports_index, name="reports"),
    path("o/<slug:org>/reports/costs/", views.report_costs, name="report-costs"),
    path("o/<slug:org>/reports/models/", views.report_models, name="report-models"),
    path("o/<slug:org>/reports/spend/", views.report_spend, name="report-spend"),
    path(
        "o/<slug:org>/reports/choice/<uuid:experiment_id>/",
        views.report_choice,
        name="report-choice",
    ),
    path("o/<slug:org>/promotions/", views.promotions_list, name="promotions"),
    path(
        "o/<slug:org>/promotions/propose/<uuid:run_id>/<int:index>/",
        views.promotion_propose_page,
        name="promotion-propose",
    ),
    path(
        "o/<slug:org>/promotions/<uuid:promotion_id>/",
        views.promotion_detail,
        name="promotion-detail",
    ),
    path(
        "o/<slug:org>/promotions/<uuid:promotion_id>/approve/",
        views.promotion_approve_view,
        name="promotion-approve",
    ),
    path(
        "o/<slug:org>/promotions/<uuid:promotion_id>/reject/",
        views.promotion_reject_view,
        name="promotion-reject",
    ),
    path("o/<slug:org>/audit/", views.audit_log, name="audit"),
]
