"""An organization's existing OpenAI-compatible deployments, benchmarked without renting.

An ``Endpoint`` is where an experiment with engine ``endpoint`` sends its traffic: a base URL
(checked against the operator's allowed hosts, ``runs.services.outbound``), the model name it
serves, an API key stored encrypted (``runs.secrets``; only its last four characters are ever
shown) and, for the cost figures, an optional price: per hour of the deployment, or per 1M
input and output tokens — never both, and no price means cost unknown, not zero.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from runs.models.tenancy import Organization, User


class Endpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="endpoints"
    )
    name = models.CharField(max_length=100)
    # Where the OpenAI API is, without its /v1 ("https://api.example.com", or with a base
    # path such as Runpod serverless's "https://api.runpod.ai/v2/<id>/openai").
    base_url = models.CharField(max_length=500)
    served_model_name = models.CharField(max_length=200)
    encrypted_api_key = models.TextField(blank=True)  # "": the endpoint takes no key
    api_key_fingerprint = models.CharField(max_length=8, blank=True)
    price_usd_per_hour = models.DecimalField(max_digits=10, decimal_places=4, null=True, blank=True)
    price_usd_per_1m_input_tokens = models.DecimalField(
        max_digits=10, decimal_places=4, null=True, blank=True
    )
    price_usd_per_1m_output_tokens = models.DecimalField(
        max_digits=10, decimal_places=4, null=True, blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        ordering = ["name", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="endpoint_name_per_org"),
            # One way of pricing: per hour, or per input and output token (both), or none.
            models.CheckConstraint(
                condition=(
                    Q(
                        price_usd_per_hour__isnull=True,
                        price_usd_per_1m_input_tokens__isnull=True,
                        price_usd_per_1m_output_tokens__isnull=True,
                    )
                    | Q(
                        price_usd_per_hour__isnull=False,
                        price_usd_per_1m_input_tokens__isnull=True,
                        price_usd_per_1m_output_tokens__isnull=True,
                    )
                    | Q(
                        price_usd_per_hour__isnull=True,
                        price_usd_per_1m_input_tokens__isnull=False,
                        price_usd_per_1m_output_tokens__isnull=False,
                    )
                ),
                name="endpoint_one_pricing",
            ),
        ]

    def __str__(self) -> str:
        # Shown in the audit log: the name and where, never the key.
        return f"{self.name} ({self.served_model_name} at {self.base_url})"

    def price_snapshot(self) -> dict:
        """The endpoint's price as a run freezes it (text decimals; None: not priced)."""
        return {
            name: None if value is None else str(value)
            for name, value in (
                ("usd_per_hour", self.price_usd_per_hour),
                ("usd_per_1m_input_tokens", self.price_usd_per_1m_input_tokens),
                ("usd_per_1m_output_tokens", self.price_usd_per_1m_output_tokens),
            )
        }
