"""``Authorization: Bearer <token>`` for every API endpoint."""

from __future__ import annotations

import datetime

from django.conf import settings
from django.db.models import F
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed

from runs.models import ApiToken
from runs.services.tenancy import token_digest


class BearerTokenAuthentication(BaseAuthentication):
    """Authenticates an active token of an active user who is still a member of the token's
    organization. The request then acts as that user, restricted to that organization."""

    keyword = b"bearer"

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword:
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Malformed Authorization header; expected 'Bearer <token>'.")
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid token.") from None
        token = unscoped_api_token(raw)
        if token is None:
            raise AuthenticationFailed("Invalid or revoked token.")
        _touch(token)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


def unscoped_api_token(raw: str) -> ApiToken | None:
    """The active token whose secret is ``raw``, of an active user still a member of the
    token's organization; else None.

    Unscoped by necessity: the secret is looked up before any tenant is known — the token
    is what tells which organization the request acts for."""
    return (
        ApiToken.objects.select_related("user", "organization")
        .filter(
            token_hash=token_digest(raw),
            revoked_at__isnull=True,
            user__is_active=True,
            # A member who left loses their tokens' access at once.
            user__memberships__organization_id=F("organization_id"),
        )
        .first()
    )


def _touch(token: ApiToken) -> None:
    """Records use, at most once per BENCHSITE_TOKEN_TOUCH_SECONDS, so reads stay cheap."""
    now = timezone.now()
    stale = now - datetime.timedelta(seconds=settings.BENCHSITE_TOKEN_TOUCH_SECONDS)
    if token.last_used_at is None or token.last_used_at <= stale:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
