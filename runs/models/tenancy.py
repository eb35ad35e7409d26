"""Tenancy: users, organizations, memberships with roles, and API tokens."""

from __future__ import annotations

import uuid

from django.contrib.auth.base_user import AbstractBaseUser, BaseUserManager
from django.contrib.auth.models import PermissionsMixin
from django.db import models
from django.utils import timezone


class UserManager(BaseUserManager):
    """Users are identified by e-mail; the address is stored lower-cased."""

    use_in_migrations = True

    def create_user(self, email: str, password: str | None = None, **extra) -> User:
        user = self.model(email=self.normalize_email(email).lower(), **extra)
        user.set_password(password)  # None gives an unusable password (token-only user)
        user.save(using=self._db)
        return user

    def create_superuser(self, email: str, password: str | None = None, **extra) -> User:
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        return self.create_user(email, password, **extra)


class User(AbstractBaseUser, PermissionsMixin):
    """A person. What they may see is decided by their memberships, never by this row alone."""

    email = models.EmailField(unique=True)
    name = models.CharField(max_length=150, blank=True)
    is_staff = models.BooleanField(default=False)
    is_active = models.BooleanField(default=True)
    date_joined = models.DateTimeField(default=timezone.now)

    objects = UserManager()

    USERNAME_FIELD = "email"
    EMAIL_FIELD = "email"

    def __str__(self) -> str:
        return self.email


class Role(models.TextChoices):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"

    @property
    def can_write(self) -> bool:
        """May create and change the organization's models, experiments and runs."""
        return self != Role.VIEWER

    @property
    def can_manage(self) -> bool:
        """May manage members, tokens, budgets and GPU prices."""
        return self in (Role.OWNER, Role.ADMIN)


class Organization(models.Model):
    """A tenant. Every tenant-owned row points here; nothing is shared across tenants.

    A ``sandbox`` organization (the demo's: ``manage.py seed_demo`` is what sets it; no page
    or API call does) may promote a simulated trial, to try the promotion flow without a GPU;
    each such promotion is stored and shown as simulated. Every other organization promotes
    measured trials only.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    sandbox = models.BooleanField(default=False)

    def __str__(self) -> str:
        return self.slug


class Membership(models.Model):
    """A user's role in one organization; at most one per (organization, user)."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="memberships"
    )
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="membership_unique_user")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.organization} ({self.role})"


class ApiToken(models.Model):
    """A bearer token for the API, acting as its user within exactly one organization.

    Only the SHA-256 of the token is stored, plus a short clear prefix so people can tell
    their tokens apart. The token itself exists once, in the response that created it.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="api_tokens"
    )
    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
