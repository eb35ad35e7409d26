"""The web container's health probe: GET /healthz on this container, exit 0 when it answers.

Standard library only, and no Django: it must be cheap every few seconds. Django answers 400
to a Host it does not allow, so the probe names the first of ALLOWED_HOSTS ("localhost" for a
wildcard); SECURE_REDIRECT_EXEMPT keeps /healthz on plain HTTP behind a TLS proxy.
"""

import http.client
import os
import sys


def probe_host() -> str:
    first = os.environ.get("ALLOWED_HOSTS", "").split(",")[0].strip().lstrip(".")
    return "localhost" if first in {"", "*"} else first


def main() -> int:
    port = int(os.environ.get("PORT", "8000"))
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/healthz", headers={"Host": probe_host()})
        status = connection.getresponse().status
    except OSError as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"unhealthy: /healthz answered {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
