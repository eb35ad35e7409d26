"""Wire shapes of runs, their trials and measurements (read-only: the orchestration and the
agent write them), and of a request to cancel a run."""

from __future__ import annotations

from rest_framework import serializers

from runs.api.strict_fields import StrictCharField, StrictChoiceField, StrictUUIDField
from runs.models import Measurement, Run, Trial
from runs.models.runs import RunTrigger


class MeasurementSerializer(serializers.ModelSerializer):
    class Meta:
        model = Measurement
        fields = [
            "id",
            "concurrency",
            "request_rate",
            "request_rate_infinite",
            "result",
            "server_metrics",
            "created_at",
        ]
        read_only_fields = fields


class TrialSerializer(serializers.ModelSerializer):
    measurements = MeasurementSerializer(many=True, read_only=True)

    class Meta:
        model = Trial
        fields = [
            "index",
            "serve_config",
            "command",
            "cold_start",
            "outcome",
            "failure_class",
            "log_tail",
            "started_at",
            "finished_at",
            "measurements",
        ]
        read_only_fields = fields


class RunSerializer(serializers.ModelSerializer):
    started_by = serializers.EmailField(source="started_by.email", read_only=True, default=None)

    class Meta:
        model = Run
        fields = [
            "id",
            "experiment",
            "state",
            "trigger",
            "reason",
            "started_by",
            "provider",
            "pod_id",
            "price_usd_hr",
            "billed_seconds",
            "cost_usd",
            "failure_reason",
            "cancel_requested_at",
            "cancel_reason",
            "agent_conflicts",
            "agent_conflict_last",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields


class RunDetailSerializer(RunSerializer):
    trials = TrialSerializer(many=True, read_only=True)

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "experiment_snapshot", "trials"]
        read_only_fields = fields


class RunStartSerializer(serializers.Serializer):
    experiment = StrictUUIDField(help_text="The experiment to run (of this organization).")
    reason = StrictCharField(
        max_length=Run._meta.get_field("reason").max_length,
        allow_blank=True,
        default="",
        help_text="Why it runs, e.g. a commit; shown with the run.",
    )
    trigger = StrictChoiceField(
        choices=RunTrigger.choices,
        default=RunTrigger.API,
        help_text="Who asked: a person's script (api), a CI pipeline (ci) or the web UI (ui).",
    )


class RunCancelSerializer(serializers.Serializer):
    reason = StrictCharField(
        max_length=Run._meta.get_field("cancel_reason").max_length,
        allow_blank=True,
        default="",
        help_text="Why the run is stopped; shown with the run and told to its agent.",
    )
