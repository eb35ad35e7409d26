"""Response shape of GPU types with the organization's prices (inputs: runs.inputs)."""

from __future__ import annotations

from rest_framework import serializers

from runs.models import GpuType


class GpuTypeSerializer(serializers.ModelSerializer):
    org_price_secure_usd_hr = serializers.SerializerMethodField()
    org_price_community_usd_hr = serializers.SerializerMethodField()
    org_price_note = serializers.SerializerMethodField()

    class Meta:
        model = GpuType
        fields = [
            "id",
            "display_name",
            "vram_gb",
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
