"""What a client may send for a registered model and an organization's GPU prices."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from runs.inputs.strict_fields import (
    LONG_TEXT_MAX_CHARS,
    StrictCharField,
    StrictDecimalField,
    StrictIntegerField,
    StrictModelSerializer,
)
from runs.models import GpuPriceOverride, ModelSpec
from runs.models.catalogue import MODEL_SPEC_FIELDS

_MAX_PARAMETERS = 10**14
# Far above any GPU's hourly price; below it, a typo of a few digits is still caught.
_MAX_PRICE_USD_HR = Decimal(1000)


class ModelSpecSerializer(StrictModelSerializer):
    parameter_count = StrictIntegerField(min_value=1, max_value=_MAX_PARAMETERS)
    num_layers = StrictIntegerField(min_value=1, max_value=10_000)
    hidden_size = StrictIntegerField(min_value=1, max_value=1_000_000)
    num_attention_heads = StrictIntegerField(min_value=1, max_value=100_000)
    num_kv_heads = StrictIntegerField(min_value=1, max_value=100_000)
    head_dim = StrictIntegerField(min_value=1, max_value=65_536)
    max_context = StrictIntegerField(min_value=16, max_value=100_000_000)
    kv_cache_bytes_per_token = serializers.SerializerMethodField()
    weight_bytes = serializers.IntegerField(read_only=True)

    class Meta:
        model = ModelSpec
        fields = [
            "id",
            *MODEL_SPEC_FIELDS,
            "kv_cache_bytes_per_token",
            "weight_bytes",
            "created_at",
        ]
        read_only_fields = ["id", "created_at"]
        # The column has no length; the input contract gives it one.
        extra_kwargs = {"notes": {"max_length": LONG_TEXT_MAX_CHARS}}
        # Uniqueness is checked by the service, with a message that names the field.
        validators = []

    def get_kv_cache_bytes_per_token(self, model: ModelSpec) -> int:
        return model.kv_cache_bytes_per_token()


def _price_field() -> StrictDecimalField:
    """A price in USD per GPU-hour, or null for "no price of our own"."""
    return StrictDecimalField(
        max_digits=8,
        decimal_places=4,
        min_value=0,
        max_value=_MAX_PRICE_USD_HR,
        default=None,
        allow_null=True,
    )


class GpuPriceSerializer(serializers.Serializer):
    price_secure_usd_hr = _price_field()
    price_community_usd_hr = _price_field()
    note = StrictCharField(
        max_length=GpuPriceOverride._meta.get_field("note").max_length,
        required=False,
        allow_blank=True,
        default="",
    )
