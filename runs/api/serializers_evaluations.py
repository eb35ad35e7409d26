"""What the API answers about an evaluation set."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import EvaluationSet


class EvaluationSetSerializer(serializers.ModelSerializer):
    """An uploaded evaluation set: its size, whether it needs a judge, and ``summary``
    (items, how many of each scorer, how many with a reference, the licence it states)."""

    class Meta:
        model = EvaluationSet
        fields = [
            "id",
            "name",
            "description",
            "sha256",
            "size_bytes",
            "items",
            "needs_judge",
            "summary",
            "created_at",
        ]
        read_only_fields = fields
