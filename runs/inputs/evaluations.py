"""What a client may send to upload an evaluation set."""

from __future__ import annotations

from rest_framework import serializers

from runs.inputs.strict_fields import StrictCharField
from runs.models import EvaluationSet


class EvaluationSetUploadSerializer(serializers.Serializer):
    name = StrictCharField(max_length=EvaluationSet._meta.get_field("name").max_length)
    description = StrictCharField(max_length=2000, required=False, allow_blank=True, default="")
    # A JSONL file (docs/quality.md); its size and every line are checked by the service.
    file = serializers.FileField()
