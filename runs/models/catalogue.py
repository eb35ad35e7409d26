"""What can be benchmarked: registered models (per tenant) and the GPU catalogue (global,
with per-tenant price overrides)."""

from __future__ import annotations

import uuid
from decimal import Decimal

from django.db import models
from django.utils import timezone

from runs.models.tenancy import Organization, User


class WeightDtype(models.TextChoices):
    """How the weights are stored; decides bytes per parameter."""

    BFLOAT16 = "bfloat16"
    FLOAT16 = "float16"
    FLOAT32 = "float32"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"  # AWQ / GPTQ 4-bit


# Bytes per weight element; 4-bit formats carry small scales that we ignore here.
WEIGHT_BYTES = {
    WeightDtype.BFLOAT16: Decimal(2),
    WeightDtype.FLOAT16: Decimal(2),
    WeightDtype.FLOAT32: Decimal(4),
    WeightDtype.FP8: Decimal(1),
    WeightDtype.INT8: Decimal(1),
    WeightDtype.INT4: Decimal("0.5"),
}
# The KV cache keeps the activation dtype; quantized weights still compute (and cache) in 16 bit.
KV_BYTES_FOR_WEIGHT_DTYPE = {
    WeightDtype.BFLOAT16: 2,
    WeightDtype.FLOAT16: 2,
    WeightDtype.FLOAT32: 4,
    WeightDtype.FP8: 2,
    WeightDtype.INT8: 2,
    WeightDtype.INT4: 2,
}


class ModelSpec(models.Model):
    """A model a team benchmarks, with the architecture facts that memory maths needs."""

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

    def kv_cache_bytes_per_token(self, kv_cache_dtype_bytes: int | None = None) -> int:
        """Bytes of KV cache one token occupies: K and V, for every layer and KV head."""
        element = kv_cache_dtype_bytes or KV_BYTES_FOR_WEIGHT_DTYPE[WeightDtype(self.dtype)]
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * element

    @property
    def weight_bytes(self) -> int:
        """Approximate size of the weights in memory (parameters × bytes per parameter)."""
        return int(self.parameter_count * WEIGHT_BYTES[WeightDtype(self.dtype)])

    def __str__(self) -> str:
        return f"{self.name} ({self.hf_repo}@{self.revision})"


class GpuType(models.Model):
    """One GPU model in the provider's catalogue, with list prices and where they came from."""

    id = models.CharField(primary_key=True, max_length=100)  # the provider's id, e.g. "NVIDIA H200"
    display_name = models.CharField(max_length=100)
    vram_gb = models.PositiveIntegerField()
    memory_bandwidth_gbps = models.PositiveIntegerField(help_text="GB/s, vendor datasheet")
    bf16_tflops = models.PositiveIntegerField(help_text="dense BF16 TFLOP/s, vendor datasheet")
    price_secure_usd_hr = models.DecimalField(max_digits=8, decimal_places=4, null=True, blank=True)
    price_community_usd_hr = models.DecimalField(
        max_digits=8, decimal_places=4, null=True, blank=True
    )
    price_source = models.CharField(max_length=300)
    price_as_of = models.DateField()
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["display_name"]

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
