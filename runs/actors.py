"""Who did something, and from where: carried from the request into every service call so
the audit log can say it."""

from __future__ import annotations

from dataclasses import dataclass

from runs.models import ApiToken, User


@dataclass(frozen=True)
class Actor:
    """The person (or system) behind a write. ``via`` says how they came in."""

    user: User | None
    via: str
    ip: str | None = None

    @property
    def label(self) -> str:
        return self.user.email if self.user else self.via

    @classmethod
    def system(cls, via: str) -> Actor:
        """An actor for operators' commands and background tasks."""
        return cls(user=None, via=via)


def actor_from_request(request) -> Actor:
    """The actor of an HTTP request: its user, and the token prefix when a token was used."""
    token = getattr(request, "auth", None)
    via = f"api-token:{token.prefix}" if isinstance(token, ApiToken) else "web"
    # REMOTE_ADDR is what the ASGI server saw; a proxy in front must be trusted to set it.
    ip = request.META.get("REMOTE_ADDR") or None
    return Actor(user=request.user, via=via, ip=ip)
