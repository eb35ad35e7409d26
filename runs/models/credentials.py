"""An organization's API keys for GPU providers and its Hugging Face token, stored encrypted
(runs/secrets.py).

The key itself is never readable from this row without ``CREDENTIALS_ENCRYPTION_KEY``; the
fingerprint (its last characters) is all that is ever shown or audited.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from runs.models.tenancy import Organization, User


class CredentialProvider(models.TextChoices):
    """Services that take an organization's own secret: Runpod rents the GPUs (the local
    provider needs no key); Hugging Face serves the weights of gated and private models."""

    RUNPOD = "runpod", "Runpod"
    HUGGINGFACE = "huggingface", "Hugging Face"


class ProviderCredential(models.Model):
    """One organization's key (or token) for one service; setting it again replaces it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="provider_credentials"
    )
    provider = models.CharField(max_length=32, choices=CredentialProvider.choices)
    encrypted_key = models.TextField()
    fingerprint = models.CharField(max_length=8)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "provider"], name="providercredential_one_per_provider"
            )
        ]

    def __str__(self) -> str:
        # Shown in the audit log's target column: never more than the fingerprint.
        return f"{self.provider} key {self.fingerprint}"
