"""Wire shapes of experiments, datasets, budgets and the audit log."""

from __future__ import annotations

import math
from decimal import Decimal

from rest_framework import serializers

from runs.experiment_spec import CONTAINER_DISK_GB
from runs.models import AuditEvent, Budget, Experiment, GpuType, ModelSpec, WorkloadDataset
from runs.services.experiments import EXPERIMENT_FIELDS


def _reject_nul(value, path: str = "") -> None:
    # PostgreSQL's jsonb cannot store U+0000; refuse it here rather than fail on write.
    if isinstance(value, str) and "\x00" in value:
        raise serializers.ValidationError(
            f"Null characters are not allowed{' in ' + path if path else ''}."
        )
    if isinstance(value, dict):
        for key, item in value.items():
            _reject_nul(key, path)
            _reject_nul(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_nul(item, f"{path}[{index}]")


class StrictJSONField(serializers.JSONField):
    """JSON that PostgreSQL can store: no NUL characters, no NaN or infinities."""

    def to_internal_value(self, data):
        value = super().to_internal_value(data)
        _reject_nul(value)
        _reject_non_finite(value)
        return value


def _reject_non_finite(value) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise serializers.ValidationError('NaN and infinite numbers are not allowed; use "inf".')
    if isinstance(value, dict):
        for item in value.values():
            _reject_non_finite(item)
    elif isinstance(value, list):
        for item in value:
            _reject_non_finite(item)


class OrgScopedPrimaryKeyField(serializers.PrimaryKeyRelatedField):
    """A reference to a row of the request's organization; others read as 'does not exist'."""

    def __init__(self, model, **kwargs):
        self.scoped_model = model
        super().__init__(queryset=model.objects.none(), **kwargs)

    def get_queryset(self):
        membership = self.context.get("membership")
        if membership is None:
            return self.scoped_model.objects.none()
        return self.scoped_model.objects.filter(organization_id=membership.organization_id)


class ExperimentSerializer(serializers.ModelSerializer):
    model = OrgScopedPrimaryKeyField(ModelSpec, pk_field=serializers.UUIDField())
    gpu_type = serializers.PrimaryKeyRelatedField(
        queryset=GpuType.objects.all(), pk_field=serializers.CharField(max_length=100)
    )
    gpu_count = serializers.IntegerField(min_value=1, max_value=8, default=1)
    # Checked against the catalogue and the model by the service (field-named errors).
    fallback_gpu_types = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, default=list
    )
    allow_other_cloud = serializers.BooleanField(required=False, default=False)
    container_disk_gb = serializers.IntegerField(
        min_value=CONTAINER_DISK_GB[0], max_value=CONTAINER_DISK_GB[1], default=80
    )
    network_volume_id = serializers.CharField(
        max_length=64, required=False, allow_blank=True, default=""
    )
    serve_grid = StrictJSONField(required=False, default=dict)
    workload = StrictJSONField()
    slos = StrictJSONField(required=False, default=dict)
    budget_cap_usd = serializers.DecimalField(
        max_digits=10, decimal_places=2, min_value=Decimal("0.01"), max_value=Decimal(10_000_000)
    )
    trials = serializers.SerializerMethodField()
    created_by = serializers.EmailField(source="created_by.email", read_only=True, default=None)

    class Meta:
        model = Experiment
        # The writable fields are the service's own list, so the two cannot drift apart.
        fields = [
            "id",
            *EXPERIMENT_FIELDS,
            "serve_flags_schema_version",
            "trials",
            "created_at",
            "updated_at",
            "created_by",
        ]
        read_only_fields = ["id", "serve_flags_schema_version", "created_at", "updated_at"]
        validators = []  # the service checks name uniqueness with a field-named message

    def get_trials(self, experiment) -> int:
        return math.prod(len(values) for values in experiment.serve_grid.values())


class EstimateSerializer(serializers.Serializer):
    trials = serializers.IntegerField()
    levels_per_trial = serializers.IntegerField()
    gpu_count = serializers.IntegerField()
    price_usd_per_gpu_hour = serializers.DecimalField(
        max_digits=10, decimal_places=4, allow_null=True
    )
    price_source = serializers.CharField()
    provisioning_seconds = serializers.FloatField()
    cold_start_seconds = serializers.FloatField()
    sweep_seconds = serializers.FloatField()
    total_seconds = serializers.FloatField()
    cost_usd = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    budget_cap_usd = serializers.DecimalField(max_digits=10, decimal_places=2)
    within_budget = serializers.BooleanField(allow_null=True)
    warnings = serializers.ListField(child=serializers.CharField())
    assumptions = serializers.DictField()


class DatasetSerializer(serializers.ModelSerializer):
    class Meta:
        model = WorkloadDataset
        fields = ["id", "name", "sha256", "size_bytes", "num_conversations", "created_at"]
        read_only_fields = fields


class DatasetUploadSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)
    file = serializers.FileField()


class BudgetSerializer(serializers.ModelSerializer):
    experiment = OrgScopedPrimaryKeyField(
        Experiment, pk_field=serializers.UUIDField(), required=False, allow_null=True
    )
    month = serializers.DateField(required=False, allow_null=True)
    limit_usd = serializers.DecimalField(
        max_digits=12, decimal_places=2, min_value=0, max_value=10**9
    )
    scope = serializers.CharField(read_only=True)

    class Meta:
        model = Budget
        fields = ["id", "scope", "month", "experiment", "limit_usd", "note", "updated_at"]
        read_only_fields = ["id", "scope", "updated_at"]
        validators = []


class AuditEventSerializer(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_label")
    via = serializers.CharField(source="actor_via")

    class Meta:
        model = AuditEvent
        fields = [
            "seq",
            "created_at",
            "actor",
            "via",
            "event",
            "target_type",
            "target_id",
            "target_repr",
            "before",
            "after",
            "ip",
            "prev_hash",
            "hash",
        ]
        read_only_fields = fields
