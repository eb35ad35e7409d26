"""The addresses a pod is handed reach the site's own routes: the socket, the REST base and
every agent route below it come from ``agents.protocol``, on the site as in the agent."""

from __future__ import annotations

import base64
from urllib.parse import urlsplit

import pytest
from django.urls import resolve
from rest_framework.test import APIClient

from agents import protocol
from runs.api.views_agent import AgentEpochView, AgentJobView, AgentMessagesView
from runs.consumers.sockets import AgentIngestConsumer
from runs.routing import websocket_urlpatterns
from runs.services import provisioning
from runs.services.run_start import run_start
from runs.services.run_tokens import run_token_issue

from .conftest import SYSTEM, make_experiment
from .test_run_as_started import RecordingProvider

pytestmark = pytest.mark.django_db


def socket_consumer(path: str):
    for pattern in websocket_urlpatterns:
        match = pattern.resolve(path.lstrip("/"))
        if match:
            return match.func.consumer_class
    return None


def test_it_hands_a_pod_the_sites_own_agent_routes(alice, settings, monkeypatch):
    settings.BENCHSITE_PUBLIC_URL = "https://bench.example.com"
    run = run_start(actor=SYSTEM, experiment=make_experiment(alice.org))
    recorder = RecordingProvider()
    monkeypatch.setattr(provisioning, "provider_for", lambda *, org, name: recorder)
    assert provisioning.run_provision(run_id=run.id, owner="w") == "created"

    (spec,) = recorder.specs
    report = protocol.JobSpec.model_validate_json(
        base64.b64decode(spec.env["BENCHSITE_JOB"])
    ).report
    assert report.ws_url == f"wss://bench.example.com/ws/agent/runs/{run.id}/"
    assert report.rest_url == "https://bench.example.com/api/v1/"
    assert socket_consumer(urlsplit(report.ws_url).path) is AgentIngestConsumer
    for route, view in [
        (protocol.AGENT_JOB_ROUTE, AgentJobView),
        (protocol.AGENT_EPOCH_ROUTE, AgentEpochView),
        (protocol.AGENT_MESSAGES_ROUTE, AgentMessagesView),
    ]:
        url = protocol.agent_route(report.rest_url, route, run_id=run.id)
        assert resolve(urlsplit(url).path).func.view_class is view, route


def test_the_job_endpoint_hands_out_the_addresses_it_was_reached_at(alice):
    run = run_start(actor=SYSTEM, experiment=make_experiment(alice.org))
    token = run_token_issue(run=run)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get(
        protocol.agent_route(
            "/" + protocol.API_BASE_ROUTE, protocol.AGENT_JOB_ROUTE, run_id=run.id
        ),
        secure=True,
    )
    assert response.status_code == 200, response.content
    report = protocol.JobSpec.model_validate(response.json()).report
    assert protocol.agent_site_urls("https://testserver/", run_id=run.id) == (
        report.ws_url,
        report.rest_url,
    )
    assert report.ws_url == f"wss://testserver/ws/agent/runs/{run.id}/"
