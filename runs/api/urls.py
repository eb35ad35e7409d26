"""Routes of the REST API, all under /api/v1/ and, for tenant data, /api/v1/orgs/<org>/."""

from __future__ import annotations

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter, SimpleRouter

from agents import protocol
from runs.api.views_agent import (
    AgentDatasetView,
    AgentEpochView,
    AgentEvaluationSetView,
    AgentJobView,
    AgentMessagesView,
)
from runs.api.views_audit import AuditEventViewSet
from runs.api.views_catalogue import GpuTypeViewSet, ModelSpecViewSet, ServeFlagsView
from runs.api.views_credentials import ProviderKeyViewSet
from runs.api.views_endpoints import EndpointViewSet
from runs.api.views_evaluations import EvaluationSetViewSet
from runs.api.views_experiments import BudgetViewSet, DatasetViewSet, ExperimentViewSet
from runs.api.views_notifications import NotificationHookViewSet
from runs.api.views_promotions import PromotionViewSet
from runs.api.views_reports import ReportViewSet
from runs.api.views_runs import RunViewSet
from runs.api.views_tenancy import MemberViewSet, OrganizationViewSet, TokenViewSet

root = DefaultRouter()
root.register("orgs", OrganizationViewSet, basename="org")
root.register("serve-flags", ServeFlagsView, basename="serve-flags")

tenant = SimpleRouter()
tenant.register("members", MemberViewSet, basename="member")
tenant.register("tokens", TokenViewSet, basename="token")
tenant.register("models", ModelSpecViewSet, basename="model")
tenant.register("gpu-types", GpuTypeViewSet, basename="gpu-type")
tenant.register("experiments", ExperimentViewSet, basename="experiment")
tenant.register("datasets", DatasetViewSet, basename="dataset")
tenant.register("evaluation-sets", EvaluationSetViewSet, basename="evaluation-set")
tenant.register("budgets", BudgetViewSet, basename="budget")
tenant.register("runs", RunViewSet, basename="run")
tenant.register("audit", AuditEventViewSet, basename="audit")
tenant.register("promotions", PromotionViewSet, basename="promotion")
tenant.register("provider-keys", ProviderKeyViewSet, basename="provider-key")
tenant.register("endpoints", EndpointViewSet, basename="endpoint")
tenant.register("notification-hooks", NotificationHookViewSet, basename="notification-hook")
tenant.register("reports", ReportViewSet, basename="reports")


def _agent(route: str) -> str:
    """A protocol route template as a Django route (its ids are UUIDs)."""
    return route.format(
        run_id="<uuid:run_id>", dataset_id="<uuid:dataset_id>", set_id="<uuid:set_id>"
    )


urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("orgs/<slug:org>/", include(tenant.urls)),
    # The agent's routes are the protocol's, as the agent builds them.
    path(_agent(protocol.AGENT_MESSAGES_ROUTE), AgentMessagesView.as_view(), name="agent-messages"),
    path(_agent(protocol.AGENT_JOB_ROUTE), AgentJobView.as_view(), name="agent-job"),
    path(_agent(protocol.AGENT_EPOCH_ROUTE), AgentEpochView.as_view(), name="agent-epoch"),
    path(_agent(protocol.AGENT_DATASET_ROUTE), AgentDatasetView.as_view(), name="agent-dataset"),
    path(
        _agent(protocol.AGENT_EVALUATION_SET_ROUTE),
        AgentEvaluationSetView.as_view(),
        name="agent-evaluation-set",
    ),
    path("", include(root.urls)),
]
