"""The audit log viewer."""

from django.urls import path

from frontend.audit import views

urlpatterns = [
    path("o/<slug:org>/audit/", views.audit_log, name="audit"),
]
