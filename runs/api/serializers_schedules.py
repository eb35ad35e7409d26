"""Response shape of an experiment's schedule (``runs.selectors.schedules.schedule_state``)."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import GateVerdict


class FiringSerializer(serializers.Serializer):
    fired_at = serializers.DateTimeField()
    run = serializers.UUIDField(allow_null=True, help_text="The run it started, if any.")
    run_state = serializers.CharField(allow_null=True)
    refused = serializers.CharField(help_text="Why no run started (empty when one did).")
    repeats = serializers.IntegerField(
        help_text="Later firings refused for the same reason, counted here."
    )
    last_fired_at = serializers.DateTimeField(
        allow_null=True, help_text="When the last of those later firings was."
    )
    verdict = serializers.ChoiceField(choices=[("", "none"), *GateVerdict.choices])
    verdict_text = serializers.CharField()
    gate = serializers.DictField(
        help_text="The gate against the promoted baseline: baseline_run, baseline_trial, "
        "regressions (config, level, metric, change, why), not_compared; or why."
    )


class ScheduleSerializer(serializers.Serializer):
    cron = serializers.CharField()
    timezone = serializers.CharField()
    description = serializers.CharField()
    thresholds = serializers.CharField()
    paused = serializers.BooleanField()
    owner = serializers.EmailField(allow_null=True, help_text="Scheduled runs start as them.")
    next_fire_at = serializers.DateTimeField(allow_null=True)
    firings = FiringSerializer(many=True)
