"""What a client may send to set the organization's provider API key."""

from __future__ import annotations

from rest_framework import serializers

from runs.inputs.strict_fields import StrictCharField
from runs.services.credentials import API_KEY_MAX_LENGTH


class ProviderKeySetSerializer(serializers.Serializer):
    # Kept exactly as sent (no trimming): the service refuses whitespace with a clear error
    # instead of silently storing a different key.
    api_key = StrictCharField(
        max_length=API_KEY_MAX_LENGTH, write_only=True, allow_blank=True, trim_whitespace=False
    )
