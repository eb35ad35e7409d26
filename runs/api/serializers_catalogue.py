"""Response shape of GPU types with the organization's prices (inputs: runs.inputs).

A GPU's physical facts are ``agents.hardware``'s (through ``GpuType.hardware``), read-only and
null for a GPU that module does not know; the catalogue stores only names and prices.
"""

from __future__ import annotations

from rest_framework import serializers

from runs.models import GpuType


class GpuTypeSerializer(serializers.ModelSerializer):
    memory_gib = serializers.SerializerMethodField(
        help_text="Total memory in GiB as CUDA reports it to vLLM (about 79.2 for an H100 80GB)."
    )
    memory_bandwidth_gbps = serializers.SerializerMethodField(
        help_text="Peak memory bandwidth in GB/s, vendor datasheet."
    )
    bf16_tflops = serializers.SerializerMethodField(
        help_text="Dense BF16 tensor TFLOP/s, vendor datasheet."
    )
    org_price_secure_usd_hr = serializers.SerializerMethodField()
    org_price_community_usd_hr = serializers.SerializerMethodField()
    org_price_note = serializers.SerializerMethodField()

    class Meta:
        model = GpuType
        fields = [
            "id",
            "display_name",
            "memory_gib",
            "memory_bandwidth_gbps",
            "bf16_tflops",
            "price_secure_usd_hr",
            "price_community_usd_hr",
            "price_source",
            "price_as_of",
            "org_price_secure_usd_hr",
            "org_price_community_usd_hr",
            "org_price_note",
        ]
        read_only_fields = fields

    def get_memory_gib(self, gpu) -> float | None:
        return gpu.hardware.memory_gib if gpu.hardware else None

    def get_memory_bandwidth_gbps(self, gpu) -> int | None:
        return round(gpu.hardware.bandwidth_tbps * 1000) if gpu.hardware else None

    def get_bf16_tflops(self, gpu) -> float | None:
        return gpu.hardware.bf16_tflops if gpu.hardware else None

    def _override(self, gpu):
        return self.context.get("overrides", {}).get(gpu.id)

    def get_org_price_secure_usd_hr(self, gpu) -> str | None:
        override = self._override(gpu)
        value = override.price_secure_usd_hr if override else None
        return None if value is None else str(value)

    def get_org_price_community_usd_hr(self, gpu) -> str | None:
        override = self._override(gpu)
        value = override.price_community_usd_hr if override else None
        return None if value is None else str(value)

    def get_org_price_note(self, gpu) -> str | None:
        override = self._override(gpu)
        return override.note if override else None
