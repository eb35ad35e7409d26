"""Sign-in: single sign-on through an OpenID Connect issuer (mozilla-django-oidc's code flow
with PKCE), beside or instead of passwords.

Guarantees:

- SSO is on when ``OIDC_RP_CLIENT_ID`` is set; otherwise ``SsoBackend`` signs nobody in and
  the sign-in page offers passwords only.
- Only an issuer-verified e-mail signs in (``email_verified`` true): a user is found by that
  address, or created on the first sign-in (without a usable password) and added to every
  organization ``BENCHSITE_SSO_DOMAIN_ORGS`` maps the address's domain to, with the mapped
  role — audited as ``member.add`` by the actor "sso". Later sign-ins change no membership.
- ``BENCHSITE_PASSWORD_LOGIN=false`` turns password sign-in off (``PasswordBackend`` then
  signs nobody in, and the page shows no password form); API tokens are unaffected.
- A mapping the settings cannot honour (no such organization, an unknown role, the owner
  role) is skipped with a warning in the log, never a failed sign-in.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.db import transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from runs.actors import Actor
from runs.models import Membership, Organization, Role, User
from runs.services.tenancy import membership_add

logger = logging.getLogger(__name__)
SSO_ACTOR = Actor.system("sso")


def sso_enabled() -> bool:
    return bool(settings.OIDC_RP_CLIENT_ID)


def domain_roles(email: str) -> list[tuple[str, str]]:
    """The (organization slug, role) pairs a first sign-in with ``email`` joins."""
    domain = email.rpartition("@")[2].lower()
    pairs = []
    for entry in settings.BENCHSITE_SSO_DOMAIN_ORGS:
        mapped, _, target = entry.partition("=")
        slug, _, role = target.partition(":")
        if mapped.strip().lower() == domain:
            pairs.append((slug.strip(), (role.strip() or Role.MEMBER).lower()))
    return pairs


def join_mapped_organizations(user: User) -> list[Membership]:
    """Adds a first-time user to the organizations their e-mail's domain maps to."""
    joined = []
    for slug, role in domain_roles(user.email):
        org = Organization.objects.filter(slug=slug).first()
        if org is None or role not in Role.values or role == Role.OWNER:
            logger.warning("BENCHSITE_SSO_DOMAIN_ORGS: cannot add a member to %r as %r", slug, role)
            continue
        if not Membership.objects.filter(organization=org, user=user).exists():
            with transaction.atomic():
                joined.append(membership_add(org=org, user=user, role=role, actor=SSO_ACTOR))
    return joined


class SsoBackend(OIDCAuthenticationBackend):
    """OpenID Connect sign-in (see the module docstring)."""

    def __init__(self, *args, **kwargs):
        self.enabled = sso_enabled()
        self.UserModel = User  # sessions signed in here are read back through it
        if self.enabled:  # the library reads (and insists on) its settings here
            super().__init__(*args, **kwargs)

    def authenticate(self, request, **kwargs):
        if not self.enabled:
            return None
        return super().authenticate(request, **kwargs)

    def verify_claims(self, claims) -> bool:
        return bool(claims.get("email")) and claims.get("email_verified") is True

    def create_user(self, claims) -> User:
        with transaction.atomic():
            user = User.objects.create_user(email=claims["email"].lower(), password=None)
            join_mapped_organizations(user)
        return user


class PasswordBackend(ModelBackend):
    """E-mail and password sign-in, unless ``BENCHSITE_PASSWORD_LOGIN`` turns it off."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not settings.BENCHSITE_PASSWORD_LOGIN:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
