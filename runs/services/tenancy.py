"""Organizations, memberships and API tokens."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from runs.actors import Actor
from runs.audit import audit_diff, audit_record, audit_snapshot
from runs.errors import Conflict, DomainValidationError
from runs.models import ApiToken, Membership, Organization, Role, User
from runs.services.audited_writes import clean_instance

TOKEN_PREFIX = "bsk_"
# Characters kept in clear: "bsk_" plus 8 of the secret, enough to tell tokens apart.
TOKEN_DISPLAY_LENGTH = len(TOKEN_PREFIX) + 8


def token_digest(raw_token: str) -> str:
    """The stored form of a token. Tokens carry 256 bits of entropy, so a fast hash suffices."""
    return hashlib.sha256(raw_token.encode()).hexdigest()


@transaction.atomic
def org_create(*, slug: str, name: str, owner: User, actor: Actor) -> Organization:
    """A new organization with ``owner`` as its first owner."""
    if Organization.objects.filter(slug=slug).exists():
        raise DomainValidationError.single("slug", f"An organization named {slug!r} exists.")
    org = Organization(slug=slug, name=name or slug)
    clean_instance(org)
    org.save()
    audit_record(
        org=org, actor=actor, event="organization.create", target=org, after=audit_snapshot(org)
    )
    membership_add(org=org, user=owner, role=Role.OWNER, actor=actor)
    return org


@transaction.atomic
def membership_add(*, org: Organization, user: User, role: Role | str, actor: Actor) -> Membership:
    """Adds ``user`` to ``org``; refuses a user who is already a member."""
    role = _parse_role(role)
    if role == Role.OWNER and not _may_grant_owner(org=org, actor=actor):
        raise PermissionDenied("Only an owner can grant or remove the owner role.")
    if Membership.objects.filter(organization=org, user=user).exists():
        raise DomainValidationError.single("email", f"{user.email} is already a member.")
    membership = Membership.objects.create(organization=org, user=user, role=role)
    audit_record(
        org=org, actor=actor, event="member.add", target=membership, after=_member_view(membership)
    )
    return membership


@transaction.atomic
def membership_add_by_email(
    *, org: Organization, email: str, role: Role | str, actor: Actor
) -> Membership:
    """Adds the user with ``email`` (matched ignoring case) to ``org``, creating them first
    when the address is new. A new user has no password: they sign in once an operator (or a
    later invitation flow) sets one; their tokens work at once. One transaction: a refused
    add leaves no new user behind."""
    email = email.lower()
    user = User.objects.filter(email=email).first()
    if user is None:
        # Lower-casing can lengthen an address ("İ" is two characters lower-cased).
        clean_instance(User(email=email), exclude=("password",))
        user = User.objects.create_user(email)
    return membership_add(org=org, user=user, role=role, actor=actor)


@transaction.atomic
def membership_change_role(*, membership: Membership, role: Role | str, actor: Actor) -> Membership:
    """Changes a member's role. Only an owner may grant or take away the owner role, and the
    last owner cannot be demoted."""
    role = _parse_role(role)
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    _check_owner_change(membership=membership, actor=actor, new_role=role)
    before = _member_view(membership)
    membership.role = role
    membership.save(update_fields=["role"])
    old, new = audit_diff(before, _member_view(membership))
    if new:
        audit_record(
            org=membership.organization,
            actor=actor,
            event="member.change_role",
            target=membership,
            before=old,
            after=new,
        )
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor: Actor) -> None:
    """Removes a member and revokes their tokens for this organization."""
    membership = Membership.objects.select_for_update().get(pk=membership.pk)
    _check_owner_change(membership=membership, actor=actor, new_role=None)
    before = _member_view(membership)
    revoked = ApiToken.objects.filter(
        organization=membership.organization, user=membership.user, revoked_at__isnull=True
    ).update(revoked_at=timezone.now())
    audit_record(
        org=membership.organization,
        actor=actor,
        event="member.remove",
        target=membership,
        before=before,
        after={"tokens_revoked": revoked},
    )
    membership.delete()


@dataclass(frozen=True)
class IssuedToken:
    """A freshly created token: ``raw`` exists only here and is never stored."""

    token: ApiToken
    raw: str


@transaction.atomic
def token_create(*, org: Organization, user: User, name: str, actor: Actor) -> IssuedToken:
    """A new API token acting as ``user`` within ``org`` (who must be a member)."""
    membership = Membership.objects.filter(organization=org, user=user).first()
    if membership is None:
        raise DomainValidationError.single("user", f"{user.email} is not a member of {org.slug}.")
    # A token acting as an owner carries every owner power: only owners may hand one out.
    if (
        membership.role == Role.OWNER
        and user != actor.user
        and not _may_grant_owner(org=org, actor=actor)
    ):
        raise PermissionDenied("Only an owner can issue a token acting as an owner.")
    name = (name or "").strip()
    if not name:
        raise DomainValidationError.single("name", "A token needs a name.")
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(
        organization=org,
        user=user,
        name=name,
        prefix=raw[:TOKEN_DISPLAY_LENGTH],
        token_hash=token_digest(raw),
        created_by=actor.user,
    )
    clean_instance(token)
    token.save()
    audit_record(
        org=org, actor=actor, event="token.create", target=token, after=audit_snapshot(token)
    )
    return IssuedToken(token=token, raw=raw)


def token_acts_as(*, org: Organization, email: str | None, caller: User) -> User:
    """The user a new token of ``org`` acts as: the member with ``email`` (matched ignoring
    case), or ``caller`` when no address is given. A non-member's address is refused on the
    field ``user``, the same answer whether or not such a user exists elsewhere."""
    if not email:
        return caller
    found = (
        Membership.objects.filter(organization=org, user__email=email.lower())
        .select_related("user")
        .first()
    )
    if found is None:
        raise DomainValidationError.single("user", "No member with this e-mail address.")
    return found.user


@transaction.atomic
def token_revoke(*, token: ApiToken, actor: Actor) -> ApiToken:
    """Revokes a token at once; revoking twice is harmless and recorded once."""
    revoked = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    token.refresh_from_db()
    if revoked:
        audit_record(
            org=token.organization,
            actor=actor,
            event="token.revoke",
            target=token,
            before={"revoked_at": None},
            after={"revoked_at": token.revoked_at.isoformat()},
        )
    return token


def _parse_role(role: Role | str) -> Role:
    try:
        return Role(role)
    except ValueError:
        allowed = ", ".join(Role.values)
        raise DomainValidationError.single(
            "role", f"Unknown role {role!r}; one of {allowed}."
        ) from None


def _may_grant_owner(*, org: Organization, actor: Actor) -> bool:
    """Operators (no user), owners, and anyone giving a still ownerless organization its
    first owner."""
    owners = Membership.objects.filter(organization=org, role=Role.OWNER)
    return actor.user is None or not owners.exists() or owners.filter(user=actor.user).exists()


def _check_owner_change(*, membership: Membership, actor: Actor, new_role: Role | None) -> None:
    touches_owner = membership.role == Role.OWNER or new_role == Role.OWNER
    if not touches_owner:
        return
    if not _may_grant_owner(org=membership.organization, actor=actor):
        raise PermissionDenied("Only an owner can grant or remove the owner role.")
    if membership.role == Role.OWNER and new_role != Role.OWNER:
        # Lock the organization first: two owners demoting each other at once must not both
        # see "another owner remains" and leave the organization with none.
        Organization.objects.select_for_update().filter(pk=membership.organization_id).first()
        owners = Membership.objects.filter(organization=membership.organization, role=Role.OWNER)
        if owners.count() <= 1:
            raise Conflict("An organization must keep at least one owner.")


def _member_view(membership: Membership) -> dict:
    return {"user": membership.user.email, "role": membership.role}
