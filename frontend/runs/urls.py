"""The live run page, run history and comparisons."""

from django.urls import path

from frontend.runs import views

urlpatterns = [
    path("o/<slug:org>/runs/", views.runs_list, name="runs"),
    path("o/<slug:org>/runs/compare/", views.runs_compare, name="runs-compare"),
    path("o/<slug:org>/runs/<uuid:run_id>/", views.run_detail, name="run-detail"),
    path("o/<slug:org>/runs/<uuid:run_id>/live.json", views.run_live, name="run-live"),
    path("o/<slug:org>/runs/<uuid:run_id>/cancel/", views.run_cancel_view, name="run-cancel"),
]
