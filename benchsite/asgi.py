"""The ASGI entry point: HTTP through Django, WebSockets through Channels (the agent's
ingest socket and the browser's live socket, see runs/routing.py). The process loads its
views and templates before it serves (``benchsite.warmup``)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402 - needs Django first

from benchsite.warmup import warm_up  # noqa: E402
from runs.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": URLRouter(websocket_urlpatterns),
    }
)
# Before the server listens: its first visitor after a deploy waits no longer than the next.
warm_up()
