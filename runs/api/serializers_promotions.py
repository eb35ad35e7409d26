"""Promotions as the API shows them (read-only: decisions are made in the web UI)."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import Promotion


class PromotionSerializer(serializers.ModelSerializer):
    experiment_name = serializers.CharField(source="experiment.name")
    run = serializers.UUIDField(source="trial.run_id")
    trial_index = serializers.IntegerField(source="trial.index")
    serve_config = serializers.JSONField(source="trial.serve_config")
    proposed_by = serializers.EmailField(source="proposed_by.email", default=None)
    decided_by = serializers.EmailField(source="decided_by.email", default=None)
    simulated = serializers.BooleanField(
        help_text="The trial ran on the simulator: a sandbox organization's promotion (the "
        "demo's), whose figures are not measurements. Always false elsewhere."
    )
    recipe = serializers.JSONField(
        help_text="serve_command, docker_command, image and runpod_pod, fixed when proposed"
    )

    class Meta:
        model = Promotion
        fields = [
            "id",
            "experiment",
            "experiment_name",
            "run",
            "trial_index",
            "state",
            "simulated",
            "serve_config",
            "note",
            "proposed_by",
            "proposed_at",
            "decided_by",
            "decided_at",
            "decision_comment",
            "superseded_by",
            "superseded_at",
            "recipe",
        ]
        read_only_fields = fields
