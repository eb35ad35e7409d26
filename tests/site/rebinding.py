"""A name whose DNS answer changes between lookups (DNS rebinding), for tests.

``Rebinding(name, first, then)`` answers ``first`` to the first lookup of ``name`` and
``then`` to every later one; other names and address literals resolve as usual. A connection
to ``first`` is refused (the public host it stands for is down), so no packet leaves the
machine, and recorded. It patches
``socket.getaddrinfo`` and ``socket.socket.connect``: in this process with pytest's
``monkeypatch`` (``Rebinding.patch``), and in a child process (a Celery worker) through
``tests/site/rebinding_site/sitecustomize.py``, which reads ``REBIND_ENV``
(``Rebinding.env``), before the child imports anything else.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

REBIND_ENV = "BENCHSITE_TEST_REBIND"
SITE_DIR = Path(__file__).resolve().parent / "rebinding_site"
# A global unicast address (example.com's, once): what the name answers the site's check.
PUBLIC = "93.184.215.14"

_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect


class Rebinding:
    """``name`` answers ``first``, then ``then``; connections to ``first`` are refused and
    recorded in ``connects`` (and appended to ``record``, a file, when given)."""

    def __init__(
        self, name: str, first: str = PUBLIC, then: str = "127.0.0.1", record: str | None = None
    ):
        self.name, self.first, self.then, self.record = name.lower(), first, then, record
        self.lookups = 0
        self.connects: list[str] = []

    def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
        if not isinstance(host, str) or host.lower().rstrip(".") != self.name:
            return _real_getaddrinfo(host, port, family, type, proto, flags)
        self.lookups += 1
        address = self.first if self.lookups == 1 else self.then
        kind = socket.AF_INET6 if ":" in address else socket.AF_INET
        sockaddr = (
            (address, int(port or 0), 0, 0)
            if kind == socket.AF_INET6
            else (address, int(port or 0))
        )
        return [(kind, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr)]

    def connect(self, sock, address):
        if isinstance(address, tuple) and address[0] == self.first != self.then:
            self.connects.append(address[0])
            if self.record:
                with open(self.record, "a") as record:
                    record.write(f"{address[0]} {address[1]}\n")
            raise ConnectionRefusedError(111, "the public host is down (test)")
        return _real_connect(sock, address)

    def patch(self, monkeypatch) -> Rebinding:
        """Installs it in this process until the test ends."""
        monkeypatch.setattr(socket, "getaddrinfo", self.getaddrinfo)
        monkeypatch.setattr(
            socket.socket, "connect", lambda sock, address: self.connect(sock, address)
        )
        return self

    def env(self) -> dict[str, str]:
        """The environment that installs it in a child Python process at start-up."""
        path = os.environ.get("PYTHONPATH", "")
        return {
            REBIND_ENV: json.dumps([self.name, self.first, self.then, self.record]),
            "PYTHONPATH": os.pathsep.join(p for p in (str(SITE_DIR), path) if p),
        }


def install_from_env() -> None:
    """Installs the rebinding ``REBIND_ENV`` describes (in a child process)."""
    name, first, then, record = json.loads(os.environ[REBIND_ENV])
    rebinding = Rebinding(name, first, then, record)
    socket.getaddrinfo = rebinding.getaddrinfo
    socket.socket.connect = lambda sock, address: rebinding.connect(sock, address)
