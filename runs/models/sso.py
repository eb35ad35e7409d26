"""Single sign-on identities: an issuer's account linked to a user of this site."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from runs.models.tenancy import User


class SsoIdentity(models.Model):
    """An issuer's account, named by the issuer (``iss``) and its subject there (``sub``, which
    an issuer never gives to another person), linked to one user: single sign-on signs in by
    this link alone, never by e-mail. At most one link per (issuer, subject)."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="sso_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    # The e-mail the issuer gave when the link was made, to tell links apart on the account
    # page; never used to find anyone.
    email = models.CharField(max_length=254, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"
