"""Sign-in: single sign-on through an OpenID Connect issuer (mozilla-django-oidc's code flow
with PKCE), beside or instead of passwords.

Guarantees:

- SSO is on when ``OIDC_RP_CLIENT_ID`` is set; otherwise ``SsoBackend`` signs nobody in and
  the sign-in page offers passwords only.
- Only an issuer-verified e-mail signs in (``email_verified`` true). A person is found by the
  link of their issuer's account (the ID token's ``iss`` and ``sub``) to a user
  (``SsoIdentity``), never by e-mail: a linked identity signs in whatever e-mail the issuer
  gives now.
- An identity not linked yet creates a user only when its e-mail is nobody's here and its
  domain is one ``BENCHSITE_SSO_DOMAIN_ORGS`` maps: the user (without a usable password) and
  its link, added to every organization the domain maps to with the mapped role — audited as
  ``member.add`` by the actor "sso". Later sign-ins change no membership. An e-mail that is
  an existing account's signs nobody in: that account attaches single sign-on itself, signed
  in, from its account page (``SSO_ATTACH_SESSION_KEY``); an unmapped domain creates nothing.
- A sign-in refused for one of these reasons leaves ``SsoRefusal`` in the session
  (``SSO_REFUSAL_SESSION_KEY``) for the page that says so.
- ``BENCHSITE_PASSWORD_LOGIN=false`` turns password sign-in off (``PasswordBackend`` then
  signs nobody in, and the page shows no password form); API tokens are unaffected.
- A mapping the settings cannot honour (no such organization, an unknown role, the owner
  role) is skipped with a warning in the log, never a failed sign-in.
"""

from __future__ import annotations

import enum
import logging
from typing import NoReturn

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.exceptions import SuspiciousOperation
from django.db import IntegrityError, transaction
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from runs.actors import Actor
from runs.errors import Conflict
from runs.models import Membership, Organization, Role, User
from runs.services.sso_identities import sso_identity_link
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


class SsoRefusal(enum.StrEnum):
    """Why the issuer's answer signed nobody in (the sign-in page says each in words)."""

    UNVERIFIED = "failed"
    EXISTING_ACCOUNT = "existing"
    UNMAPPED_DOMAIN = "unmapped"
    ATTACHED_ELSEWHERE = "taken"


# The signed-in user who asked to attach single sign-on to their account (their id), set by
# the account page and taken by the next answer from the issuer.
SSO_ATTACH_SESSION_KEY = "sso_attach_user"
SSO_REFUSAL_SESSION_KEY = "sso_refusal"


class SsoBackend(OIDCAuthenticationBackend):
    """OpenID Connect sign-in (see the module docstring). Django builds a backend per
    ``authenticate`` call, so what one answer sets on ``self`` concerns that answer alone."""

    def __init__(self, *args, **kwargs):
        self.enabled = sso_enabled()
        self.UserModel = User  # sessions signed in here are read back through it
        self.attaching: User | None = None
        if self.enabled:  # the library reads (and insists on) its settings here
            super().__init__(*args, **kwargs)

    def authenticate(self, request, **kwargs):
        if not self.enabled or request is None or "code" not in request.GET:
            return None  # not the issuer's answer (a password sign-in, say)
        # An attach request serves this one answer: taken now, whatever the answer says.
        asked = request.session.pop(SSO_ATTACH_SESSION_KEY, None)
        if asked is not None and request.user.is_authenticated and request.user.pk == asked:
            self.attaching = request.user
        return super().authenticate(request, **kwargs)

    def get_userinfo(self, access_token, id_token, payload):
        """The userinfo claims with the verified ID token's issuer; the subject must be the
        ID token's (OpenID Connect Core 5.3.2), so a link is only ever made by the token."""
        claims = super().get_userinfo(access_token, id_token, payload)
        if not payload.get("iss") or not payload.get("sub") or claims.get("sub") != payload["sub"]:
            raise SuspiciousOperation("the userinfo's subject is not the ID token's")
        return {**claims, "iss": payload["iss"]}

    def verify_claims(self, claims) -> bool:
        if bool(claims.get("email")) and claims.get("email_verified") is True:
            return True
        self._note(SsoRefusal.UNVERIFIED)
        return False

    def filter_users_by_claims(self, claims):
        return User.objects.filter(
            sso_identities__issuer=claims["iss"], sso_identities__subject=claims["sub"]
        )

    def update_user(self, user: User, claims) -> User:
        """A linked identity; while attaching, it must be the signed-in user's own."""
        if self.attaching is not None and self.attaching.pk != user.pk:
            self._refuse(SsoRefusal.ATTACHED_ELSEWHERE)
        return user

    def create_user(self, claims) -> User:
        """An identity not linked yet: attached to the signed-in user who asked, else a new
        user where the e-mail is nobody's and its domain is mapped (module docstring)."""
        if self.attaching is not None:
            return self._link(self.attaching, claims, Actor(user=self.attaching, via="web"))
        email = claims["email"].lower()
        if User.objects.filter(email__iexact=email).exists():
            self._refuse(SsoRefusal.EXISTING_ACCOUNT)
        if not domain_roles(email):
            self._refuse(SsoRefusal.UNMAPPED_DOMAIN)
        try:
            with transaction.atomic():
                user = User.objects.create_user(email=email, password=None)
                self._link(user, claims, SSO_ACTOR)
                join_mapped_organizations(user)
        except IntegrityError:  # the same person's other sign-in created it a moment ago
            self._refuse(SsoRefusal.EXISTING_ACCOUNT)
        return user

    def _link(self, user: User, claims, actor: Actor) -> User:
        try:
            sso_identity_link(
                user=user,
                issuer=claims["iss"],
                subject=claims["sub"],
                email=claims["email"],
                actor=actor,
            )
        except Conflict:
            self._refuse(SsoRefusal.ATTACHED_ELSEWHERE)
        return user

    def _note(self, refusal: SsoRefusal) -> None:
        self.request.session[SSO_REFUSAL_SESSION_KEY] = refusal.value

    def _refuse(self, refusal: SsoRefusal) -> NoReturn:
        """Signs nobody in (the library answers the issuer's callback as a failure)."""
        self._note(refusal)
        raise SuspiciousOperation(f"single sign-on refused: {refusal.value}")


class PasswordBackend(ModelBackend):
    """E-mail and password sign-in, unless ``BENCHSITE_PASSWORD_LOGIN`` turns it off."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if not settings.BENCHSITE_PASSWORD_LOGIN:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)
