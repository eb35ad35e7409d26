"""The live run page, run history and comparisons."""

from django.urls import path

from frontend import views_runs

urlpatterns = [
    path("o/<slug:org>/runs/", views_runs.runs_list, name="runs"),
    path("o/<slug:org>/runs/compare/", views_runs.runs_compare, name="runs-compare"),
    path("o/<slug:org>/runs/<uuid:run_id>/", views_runs.run_detail, name="run-detail"),
    path("o/<slug:org>/runs/<uuid:run_id>/live.json", views_runs.run_live, name="run-live"),
    path("o/<slug:org>/runs/<uuid:run_id>/cancel/", views_runs.run_cancel_view, name="run-cancel"),
]
