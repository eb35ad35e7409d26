"""What the demo's stand-in servers and the tests' share: a ``ThreadingHTTPServer`` on
127.0.0.1 at a free port, served from a daemon thread, and a JSON answer written in one go.

Guarantees: a server listens on 127.0.0.1 only, on a port the system picks; ``stop_serving``
returns within moments (its handler threads are daemons)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_in_thread(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server for ``handler`` on 127.0.0.1 at a free port, already serving."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def server_url(server: ThreadingHTTPServer | None) -> str:
    assert server is not None, "start() the stand-in first"
    host, port = server.server_address[:2]
    return f"http://{host}:{port}"


def stop_serving(server: ThreadingHTTPServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


def send_json(handler: BaseHTTPRequestHandler, status: int, body: object) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
