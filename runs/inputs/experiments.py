"""What a client may send for an experiment, a dataset upload and a budget."""

from __future__ import annotations

from decimal import Decimal

from rest_framework import serializers

from runs.experiment_spec import (
    CONTAINER_DISK_GB,
    MAX_COMPARE_IMAGE_TAGS,
    experiment_trial_plan,
)
from runs.inputs.json_schemas import (
    EVALUATION_FIELD,
    LORA_ADAPTERS_FIELD,
    SEARCH_FIELD,
    SERVE_GRID_FIELD,
    SLOS_FIELD,
    WORKLOAD_FIELD,
)
from runs.inputs.strict_fields import (
    LONG_TEXT_MAX_CHARS,
    StrictBooleanField,
    StrictCharField,
    StrictChoiceField,
    StrictDateField,
    StrictDecimalField,
    StrictIntegerField,
    StrictJSONField,
    StrictListField,
    StrictModelSerializer,
    StrictUUIDField,
)
from runs.models import Budget, Endpoint, Experiment, GpuType, ModelSpec, WorkloadDataset
from runs.models.experiments import DATASET_FORMAT_CHOICES, SHAREGPT
from runs.placement import MAX_FALLBACK_GPU_TYPES
from runs.services.experiments import EXPERIMENT_FIELDS

_GPU_TYPE_ID_MAX = GpuType._meta.get_field("id").max_length


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


class ExperimentSerializer(StrictModelSerializer):
    model = OrgScopedPrimaryKeyField(ModelSpec, pk_field=StrictUUIDField())
    gpu_type = serializers.PrimaryKeyRelatedField(
        queryset=GpuType.objects.all(), pk_field=StrictCharField(max_length=_GPU_TYPE_ID_MAX)
    )
    gpu_count = StrictIntegerField(min_value=1, max_value=8, default=1)
    # Engine "endpoint" only: the existing deployment measured (runs.models.endpoints).
    endpoint = OrgScopedPrimaryKeyField(
        Endpoint, pk_field=StrictUUIDField(), required=False, allow_null=True, default=None
    )
    # Checked against the catalogue and the model by the service (field-named errors).
    fallback_gpu_types = StrictListField(
        child=StrictCharField(max_length=_GPU_TYPE_ID_MAX),
        max_length=MAX_FALLBACK_GPU_TYPES,
        required=False,
        default=list,
    )
    allow_other_cloud = StrictBooleanField(required=False, default=False)
    container_disk_gb = StrictIntegerField(
        min_value=CONTAINER_DISK_GB[0], max_value=CONTAINER_DISK_GB[1], default=80
    )
    network_volume_id = StrictCharField(
        max_length=Experiment._meta.get_field("network_volume_id").max_length,
        required=False,
        allow_blank=True,
        default="",
    )
    # vLLM as an axis: more images the grid runs on, one pod each (the service checks them).
    compare_image_tags = StrictListField(
        child=StrictCharField(max_length=Experiment._meta.get_field("engine_image_tag").max_length),
        max_length=MAX_COMPARE_IMAGE_TAGS,
        required=False,
        default=list,
    )
    # Shapes and examples from agents.protocol (runs.inputs.json_schemas); the service checks.
    serve_grid = StrictJSONField(required=False, default=dict, **SERVE_GRID_FIELD)
    # Add a trial with vLLM's defaults (unless the grid has one): the answer's baseline.
    defaults_trial = StrictBooleanField(required=False, default=False)
    # vLLM runs the model's own code in the organization's pod (audited when it changes).
    trust_remote_code = StrictBooleanField(required=False, default=False)
    # LoRA adapters served beside the model (real vLLM); requests are spread over them.
    lora_adapters = StrictJSONField(required=False, default=list, **LORA_ADAPTERS_FIELD)
    workload = StrictJSONField(**WORKLOAD_FIELD)
    slos = StrictJSONField(required=False, default=dict, **SLOS_FIELD)
    # How runs search the grid ({}: every trial); runs.experiment_search, the service checks.
    search = StrictJSONField(required=False, default=dict, **SEARCH_FIELD)
    # What the configurations are scored on and the quality floor they must keep ({}: none);
    # runs.experiment_evaluation, the service checks.
    evaluation = StrictJSONField(required=False, default=dict, **EVALUATION_FIELD)
    budget_cap_usd = StrictDecimalField(
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
        # The column has no length; the input contract gives it one.
        extra_kwargs = {"description": {"max_length": LONG_TEXT_MAX_CHARS}}
        validators = []  # the service checks name uniqueness with a field-named message

    def get_trials(self, experiment) -> int:
        return len(experiment_trial_plan(experiment))


class DatasetUploadSerializer(serializers.Serializer):
    name = StrictCharField(max_length=WorkloadDataset._meta.get_field("name").max_length)
    # What the file holds: ShareGPT conversations (the default) or a trace of that format.
    format = StrictChoiceField(choices=DATASET_FORMAT_CHOICES, default=SHAREGPT)
    # Its size is bounded by DATASET_MAX_BYTES and its content checked by the service.
    file = serializers.FileField()


class BudgetSerializer(StrictModelSerializer):
    experiment = OrgScopedPrimaryKeyField(
        Experiment, pk_field=StrictUUIDField(), required=False, allow_null=True
    )
    month = StrictDateField(required=False, allow_null=True)
    limit_usd = StrictDecimalField(max_digits=12, decimal_places=2, min_value=0, max_value=10**9)
    scope = serializers.CharField(read_only=True)

    class Meta:
        model = Budget
        fields = ["id", "scope", "month", "experiment", "limit_usd", "note", "updated_at"]
        read_only_fields = ["id", "scope", "updated_at"]
        validators = []
