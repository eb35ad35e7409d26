"""Prints shell `export` lines choosing the services the test run uses.

- DATABASE_URL / REDIS_URL already set: used as they are (checked to answer).
- Otherwise PostgreSQL (database ``test``) and Redis on 127.0.0.1 are used when they answer.
- When a service does not answer: with CI=true this exits 1 naming it (CI must never skip a
  test for a missing service); otherwise it falls back to SQLite / no Redis with a warning
  on stderr, and the Redis tests skip.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
import tempfile
from urllib.parse import urlparse

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/test"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def answers(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    if parsed.scheme.startswith("sqlite"):
        return True
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), 2
        ):
            return True
    except OSError:
        return False


def main() -> int:
    in_ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    exports = {"DEBUG": "true"}
    database_url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE_URL
    redis_url = os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
    if answers(database_url, 5432):
        exports["DATABASE_URL"] = database_url
    elif in_ci:
        print(
            f"CI: the database at {urlparse(database_url).hostname} does not answer",
            file=sys.stderr,
        )
        return 1
    else:
        path = os.path.join(tempfile.gettempdir(), "benchsite-test.sqlite3")
        print("warning: PostgreSQL not reachable; testing on SQLite", file=sys.stderr)
        exports["DATABASE_URL"] = f"sqlite:///{path}"
    if answers(redis_url, 6379):
        exports["REDIS_URL"] = redis_url
    elif in_ci:
        print(f"CI: Redis at {urlparse(redis_url).hostname} does not answer", file=sys.stderr)
        return 1
    else:
        print("warning: Redis not reachable; Redis tests will skip", file=sys.stderr)
        exports["REDIS_URL"] = ""
    for name, value in exports.items():
        print(f"export {name}={shlex.quote(value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
