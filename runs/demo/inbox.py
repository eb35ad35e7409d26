"""The demo's inbox: a webhook receiver on 127.0.0.1 and an e-mail sink, so that the demo's
notification hooks deliver somewhere a newcomer can look (the notifications page shows both,
``runs.selectors.demo_inbox``).

Guarantees:

- ``inbox_start`` listens on 127.0.0.1 only, on a port the system picks, and keeps each
  POST as one JSON line in the inbox folder: when it came, its event and delivery headers,
  whether its ``X-Benchsite-Signature`` holds under the secret it was given (``signature``
  as a receiver checks it), and its JSON body (at most ``MAX_BODY_BYTES``; a longer one is
  answered 413 and kept as cut). It answers every POST (204), so deliveries succeed.
- ``MailSinkBackend`` is a Django e-mail backend that sends nothing anywhere: each message
  becomes one JSON line (from, to, subject, text body) in the same folder. Both processes of
  the demo (Daphne and the command's worker) write there; each line is one locked append.
- Nothing here is used outside ``manage.py demo_run``; the folder is the demo's own
  (``MEDIA_ROOT/demo-inbox``), and the site reads it only where ``BENCHSITE_DEMO_INBOX`` is set.
"""

from __future__ import annotations

import datetime
import fcntl
import hmac
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from django.conf import settings
from django.core.mail.backends.base import BaseEmailBackend

from runs.selectors.demo_inbox import MAIL_FILE, WEBHOOKS_FILE
from runs.services.notifications.transport import signature

MAX_BODY_BYTES = 64 * 1024
# A webhook delivery's signature older than this is refused by a careful receiver.
SIGNATURE_MAX_AGE_S = 300


def _append(path: Path, record: dict) -> None:
    line = json.dumps(record, sort_keys=True) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as file:
        # Two processes append here: a lock keeps each line whole.
        fcntl.flock(file, fcntl.LOCK_EX)
        file.write(line)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def signature_verdict(header: str, body: bytes, secret: str | None, now: float) -> str:
    """``valid``, ``invalid``, ``stale`` or ``unchecked`` (no secret): how a receiver reads
    ``X-Benchsite-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">``."""
    if not secret:
        return "unchecked"
    try:
        parts = dict(part.split("=", 1) for part in header.split(","))
        timestamp = int(parts["t"])
    except (ValueError, KeyError):
        return "invalid"
    if not hmac.compare_digest(signature(secret, timestamp, body), header):
        return "invalid"
    return "stale" if abs(now - timestamp) > SIGNATURE_MAX_AGE_S else "valid"


@dataclass
class Inbox:
    """The running receiver: its URL and the webhook secret it checks signatures with."""

    folder: Path
    url: str
    server: ThreadingHTTPServer
    secret: str | None = field(default=None)

    def stop(self) -> None:
        """Stops listening (bounded: the handler threads are daemons)."""
        self.server.shutdown()
        self.server.server_close()


def inbox_start(folder: Path) -> Inbox:
    """The demo's webhook receiver, serving in a thread of this process until ``stop``."""
    inbox: Inbox

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(min(length, MAX_BODY_BYTES))
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = body.decode("utf-8", "replace")
            header = self.headers.get("X-Benchsite-Signature", "")
            _append(
                inbox.folder / WEBHOOKS_FILE,
                {
                    "received_at": _now(),
                    "event": self.headers.get("X-Benchsite-Event", ""),
                    "delivery": self.headers.get("X-Benchsite-Delivery", ""),
                    "signature": signature_verdict(header, body, inbox.secret, time.time()),
                    "body": parsed,
                },
            )
            self.send_response(413 if length > MAX_BODY_BYTES else 204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass  # the demo's terminal shows its own lines only

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    server.daemon_threads = True
    inbox = Inbox(folder=folder, url=f"http://127.0.0.1:{server.server_address[1]}/", server=server)
    threading.Thread(target=server.serve_forever, name="demo-receiver", daemon=True).start()
    return inbox


class MailSinkBackend(BaseEmailBackend):
    """Django's e-mail backend for the demo: every message kept in the demo inbox
    (``BENCHSITE_DEMO_INBOX``), none sent."""

    def send_messages(self, email_messages) -> int:
        folder = Path(settings.BENCHSITE_DEMO_INBOX)
        for message in email_messages:
            _append(
                folder / MAIL_FILE,
                {
                    "received_at": _now(),
                    "from": message.from_email,
                    "to": list(message.to),
                    "subject": message.subject,
                    "body": message.body,
                },
            )
        return len(email_messages)
