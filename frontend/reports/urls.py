"""Reports for managers: costs, models, spend, an experiment's model choice."""

from django.urls import path

from frontend.reports import views

urlpatterns = [
    path("o/<slug:org>/reports/", views.reports_index, name="reports"),
    path("o/<slug:org>/reports/costs/", views.report_costs, name="report-costs"),
    path("o/<slug:org>/reports/models/", views.report_models, name="report-models"),
    path("o/<slug:org>/reports/spend/", views.report_spend, name="report-spend"),
    path("o/<slug:org>/reports/cold-starts/", views.report_cold_starts, name="report-cold-starts"),
    path(
        "o/<slug:org>/reports/choice/<uuid:experiment_id>/",
        views.report_choice,
        name="report-choice",
    ),
]
