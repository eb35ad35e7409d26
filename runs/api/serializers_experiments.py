"""Response shapes of estimates, datasets and the audit log (their inputs: runs.inputs)."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import AuditEvent, WorkloadDataset
from runs.selectors.audit_log import AUDIT_COLUMNS, audit_row


class EstimateSerializer(serializers.Serializer):
    trials = serializers.IntegerField()
    levels_per_trial = serializers.IntegerField()
    gpu_count = serializers.IntegerField()
    pods = serializers.IntegerField()
    price_usd_per_gpu_hour = serializers.DecimalField(
        max_digits=10, decimal_places=4, allow_null=True
    )
    price_source = serializers.CharField()
    provisioning_seconds = serializers.FloatField()
    weights_download_seconds = serializers.FloatField()
    cold_start_seconds = serializers.FloatField()
    sweep_seconds = serializers.FloatField()
    total_seconds = serializers.FloatField(
        help_text="The run's duration: on the modelled GPU, or (a simulated experiment) what "
        "computing it takes here."
    )
    gpu_seconds = serializers.FloatField(
        help_text="What the run would take on the experiment's GPU: provisioning, cold starts "
        "and the sweep (for a real run, total_seconds)."
    )
    cost_usd = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    budget_cap_usd = serializers.DecimalField(max_digits=10, decimal_places=2)
    within_budget = serializers.BooleanField(allow_null=True)
    warnings = serializers.ListField(child=serializers.CharField())
    assumptions = serializers.DictField()
    calibration = serializers.JSONField(
        allow_null=True,
        help_text="The organization's calibration the sweep was timed with (when, from which "
        "runs, its own fit error), or null: the simulator's defaults.",
    )


class ConfigPredictionSerializer(serializers.Serializer):
    label = serializers.CharField()
    image_tag = serializers.CharField(allow_null=True)
    serve_config = serializers.DictField()
    starts = serializers.BooleanField()
    refusal = serializers.CharField(allow_null=True)
    capacity = serializers.FloatField(allow_null=True)
    capacity_axis = serializers.CharField(allow_null=True)
    output_throughput = serializers.FloatField(allow_null=True)
    cost_per_million_usd = serializers.DecimalField(
        max_digits=14, decimal_places=2, allow_null=True
    )
    priced_for = serializers.CharField(
        help_text="The GPUs the cost is priced for: the configuration's tensor × pipeline × "
        "data parallel sizes of the experiment's GPUs (docs/costs.md)."
    )
    gpu_seconds = serializers.FloatField()
    kv_cache_tokens = serializers.IntegerField(allow_null=True)


class PredictionSerializer(serializers.Serializer):
    """Every configuration predicted on the simulator (``simulated`` is always true)."""

    simulated = serializers.BooleanField()
    rows = ConfigPredictionSerializer(many=True)
    best = serializers.IntegerField(allow_null=True)
    exhaustive_gpu_minutes = serializers.FloatField()
    price_usd_per_gpu_hour = serializers.DecimalField(
        max_digits=10, decimal_places=4, allow_null=True
    )
    price_source = serializers.CharField()
    with_slos = serializers.BooleanField()
    warnings = serializers.ListField(child=serializers.CharField())
    cpu_seconds = serializers.FloatField()
    too_large = serializers.BooleanField()
    calibration = serializers.JSONField(
        allow_null=True,
        help_text="The organization's calibration the simulator used: id, created_at, runs "
        "(its measured runs, newest first), points, fit_error_pct (its own mean absolute "
        "error after the fit; error_before_pct with the defaults; per metric in metrics) "
        "and constants; null: the simulator's defaults.",
    )


class DatasetSerializer(serializers.ModelSerializer):
    """An uploaded dataset: ``format`` says what its file holds; ``num_conversations`` is a
    ShareGPT file's (null for a trace)."""

    class Meta:
        model = WorkloadDataset
        fields = ["id", "name", "format", "sha256", "size_bytes", "num_conversations", "created_at"]
        read_only_fields = fields


class DatasetDetailSerializer(DatasetSerializer):
    """One dataset with a trace's ``summary`` (docs/datasets.md: counts, length statistics
    and histograms, arrivals per bucket, shared-prefix share); ``{}`` for ShareGPT."""

    class Meta(DatasetSerializer.Meta):
        fields = [*DatasetSerializer.Meta.fields, "summary"]
        read_only_fields = fields


class AuditEventSerializer(serializers.ModelSerializer):
    """An audit event as ``runs.selectors.audit_log.audit_row`` writes it (the fields below only
    describe it for the schema)."""

    actor = serializers.CharField(source="actor_label")
    via = serializers.CharField(source="actor_via")

    class Meta:
        model = AuditEvent
        fields = list(AUDIT_COLUMNS)
        read_only_fields = fields

    def to_representation(self, instance):
        return audit_row(instance)
