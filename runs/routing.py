"""WebSocket routes. The browser socket is session-authenticated and checks the Origin
(cross-site WebSocket hijacking); the agent socket carries its run token and no Origin."""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from agents import protocol
from runs.consumers.sockets import AgentIngestConsumer, RunLiveConsumer

websocket_urlpatterns = [
    path(protocol.AGENT_SOCKET_ROUTE.format(run_id="<str:run_id>"), AgentIngestConsumer.as_asgi()),
    path(
        "ws/runs/<str:run_id>/",
        AllowedHostsOriginValidator(AuthMiddlewareStack(RunLiveConsumer.as_asgi())),
    ),
]
