"""What a client may send to add an existing endpoint (``runs.services.endpoints`` checks the
address, the key and the model by asking the endpoint)."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from runs.inputs.strict_fields import StrictCharField, StrictDecimalField
from runs.models import Endpoint


def _price(help_text: str) -> StrictDecimalField:
    return StrictDecimalField(
        max_digits=10,
        decimal_places=4,
        min_value=Decimal(0),
        max_value=Decimal(100_000),
        required=False,
        allow_null=True,
        default=None,
        help_text=help_text,
    )


class EndpointCreateSerializer(serializers.Serializer):
    name = StrictCharField(max_length=Endpoint._meta.get_field("name").max_length)
    base_url = StrictCharField(
        max_length=Endpoint._meta.get_field("base_url").max_length,
        help_text="The OpenAI-compatible API's base, before /v1 (a trailing /v1 is dropped).",
    )
    served_model_name = StrictCharField(
        max_length=Endpoint._meta.get_field("served_model_name").max_length
    )
    api_key = StrictCharField(
        max_length=500,
        required=False,
        default="",
        allow_blank=True,
        write_only=True,
        help_text="Sent as a bearer token; stored encrypted, never shown again.",
    )
    price_usd_per_hour = _price("What the deployment costs per hour (or price per token).")
    price_usd_per_1m_input_tokens = _price("Per 1M input tokens (with the output price).")
    price_usd_per_1m_output_tokens = _price("Per 1M output tokens (with the input price).")
