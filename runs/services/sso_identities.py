"""Linking single sign-on identities to users.

Guarantees: an identity (issuer + subject) is linked to at most one user, ever by this
service; linking it again to the same user changes nothing; a link to another user is
refused with ``Conflict`` and nothing is written. A new link is audited as
``sso_identity.link`` in every organization the user belongs to, in the same transaction.
"""

from __future__ import annotations

import logging

from django.db import IntegrityError, transaction

from runs.actors import Actor
from runs.audit import audit_record
from runs.errors import Conflict
from runs.models import Membership, SsoIdentity, User

logger = logging.getLogger(__name__)


@transaction.atomic
def sso_identity_link(
    *, user: User, issuer: str, subject: str, email: str, actor: Actor
) -> SsoIdentity:
    """Links the issuer's account ``subject`` at ``issuer`` to ``user`` (see the module
    docstring); ``email`` is what the issuer gave, kept to tell links apart."""
    linked = SsoIdentity.objects.filter(issuer=issuer, subject=subject).first()
    if linked is not None:
        if linked.user_id != user.pk:
            raise Conflict("This single sign-on identity is attached to another account.")
        return linked
    try:
        with transaction.atomic():
            identity = SsoIdentity.objects.create(
                user=user, issuer=issuer, subject=subject, email=email[:254]
            )
    except IntegrityError:  # linked at the same moment by another request
        raise Conflict("This single sign-on identity is attached to another account.") from None
    for membership in Membership.objects.filter(user=user).select_related("organization"):
        audit_record(
            org=membership.organization,
            actor=actor,
            event="sso_identity.link",
            target=identity,
            after={"user": user.email, "issuer": issuer},
        )
    logger.info("user %s: single sign-on identity at %s linked", user.pk, issuer)
    return identity
