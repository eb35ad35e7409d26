"""What can be benchmarked: registered models (per tenant) and the GPU catalogue (global,
with per-tenant price overrides)."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from agents.hardware import REGISTERED_FACTS, GpuProfile, ModelFacts, gpu_profile
from runs.gpu_catalogue_seed import GPU_DATASHEETS, GpuDatasheet
from runs.models.tenancy import Organization, User


class WeightDtype(models.TextChoices):
    """How the weights are stored; decides bytes per parameter."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"  # AWQ / GPTQ 4-bit
    # As a config.json's quantization_config names them (agents.hardware reads them so).
    AWQ = "awq"
    GPTQ = "gptq"


class ModelSpec(models.Model):
    """A model a team benchmarks, with the architecture facts that memory maths needs: the
    dense columns, and in ``architecture`` the facts beyond them (vocabulary, FFN, experts,
    MLA, sliding windows), exactly ``ModelFacts.to_architecture()`` of the model as
    ``agents.hardware`` read it from its config.json; ``{}`` for a model stated by its
    columns alone (every such fact at its default)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    hf_repo = models.CharField(max_length=200)
    revision = models.CharField(max_length=100, default="main")
    parameter_count = models.BigIntegerField()
    num_layers = models.PositiveIntegerField()
    hidden_size = models.PositiveIntegerField()
    num_attention_heads = models.PositiveIntegerField()
    num_kv_heads = models.PositiveIntegerField()
    head_dim = models.PositiveIntegerField()
    dtype = models.CharField(
        max_length=16, choices=WeightDtype.choices, default=WeightDtype.BFLOAT16
    )
    max_context = models.PositiveIntegerField()
    architecture = models.JSONField(default=dict, blank=True)
    licence = models.CharField(max_length=100, blank=True)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        User, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "hf_repo", "revision"],
                name="modelspec_unique_repo_revision",
            )
        ]
        ordering = ["name", "id"]

    @property
    def facts(self) -> ModelFacts:
        """The model as ``agents.hardware`` (the memory maths, the simulator) sees it: its
        columns and its ``architecture``, translated as a job's ``ModelSource.facts`` is."""
        return ModelFacts.from_registered(
            **{name: getattr(self, name) for name in REGISTERED_FACTS},
            architecture=self.architecture,
        )

    def kv_cache_bytes_per_token(self, kv_cache_dtype: str = "auto") -> int:
        """Bytes of KV cache one token of context occupies on one GPU, every layer holding
        it: K and V of every KV head, or MLA's one latent per layer (``agents.hardware``)."""
        return int(self.facts.kv_bytes_per_token(kv_cache_dtype))

    @property
    def weight_bytes(self) -> int:
        """Approximate size of the weights in memory (parameters × bytes per parameter;
        every expert of a MoE model)."""
        return int(self.facts.weight_bytes)

    def __str__(self) -> str:
        return f"{self.name} ({self.hf_repo}@{self.revision})"


# What a team states about a model, in the columns' order: every column but the ones the site
# sets itself (``architecture`` is read from a config.json, never typed). agents.hardware's
# REGISTERED_FACTS are among them (``ModelSpec.facts``).
MODEL_SPEC_FIELDS = tuple(
    column.name
    for column in ModelSpec._meta.concrete_fields
    if column.name not in {"id", "organization", "architecture", "created_at", "created_by"}
)


class GpuType(models.Model):
    """One GPU model in the provider's catalogue, with list prices and where they came from."""

    id = models.CharField(primary_key=True, max_length=100)  # the provider's id, e.g. "NVIDIA H200"
    display_name = models.CharField(max_length=100)
    price_secure_usd_hr = models.DecimalField(max_digits=8, decimal_places=4, null=True, blank=True)
    price_community_usd_hr = models.DecimalField(
        max_digits=8, decimal_places=4, null=True, blank=True
    )
    price_source = models.CharField(max_length=300)
    price_as_of = models.DateField()
    updated_at = models.DateTimeField(default=timezone.now)
    # The NVIDIA driver the latest pod of this type reported (its agent's hello; a fact of
    # the provider's hosts, not of any tenant), and when: what the builder checks an image's
    # CUDA against before a run. Blank until a pod of the type has said hello.
    driver_version = models.CharField(max_length=100, blank=True, default="")
    driver_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["display_name"]

    @property
    def hardware(self) -> GpuProfile | None:
        """The GPU's physical facts (memory in GiB as vLLM sees it, bandwidth, FLOP/s) from
        ``agents.hardware``, the one place they are stated: the site stores none of them.
        None for a type that module lacks."""
        try:
            return gpu_profile(self.id)
        except ValueError:
            return None

    @property
    def datasheet(self) -> GpuDatasheet | None:
        """The facts the catalogue states beside ``hardware`` (FP8 and FP4 peaks; memory,
        bandwidth and BF16 for a GPU the simulator lacks), with their source; None for a
        type it states nothing of (``runs.gpu_catalogue_seed.GPU_DATASHEETS``)."""
        return GPU_DATASHEETS.get(self.id)

    @classmethod
    def by_memory(cls) -> list[GpuType]:
        """Every GPU type, smallest memory first, then by display name; the types
        ``agents.hardware`` does not know come last (their memory is not known)."""

        def order(gpu: GpuType) -> tuple:
            hardware = gpu.hardware
            return (hardware is None, hardware.memory_gib if hardware else 0.0, gpu.display_name)

        return sorted(cls.objects.all(), key=order)

    def __str__(self) -> str:
        return self.display_name


class GpuPriceOverride(models.Model):
    """An organization's own price for a GPU type (negotiated rate, reserved capacity …)."""

    organization = models.ForeignKey(
        Organization, on_delete=models.CASCADE, related_name="gpu_price_overrides"
    )
    gpu_type = models.ForeignKey(GpuType, on_delete=models.CASCADE, related_name="+")
    price_secure_usd_hr = models.DecimalField(max_digits=8, decimal_places=4, null=True, blank=True)
    price_community_usd_hr = models.DecimalField(
        max_digits=8, decimal_places=4, null=True, blank=True
    )
    note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["organization", "gpu_type"], name="price_override_unique"
            )
        ]

    def __str__(self) -> str:
        return f"price of {self.gpu_type_id}"
