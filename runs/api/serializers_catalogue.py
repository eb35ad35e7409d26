"""Response shape of GPU types with the organization's prices (inputs: runs.inputs).

A GPU's physical facts are ``agents.hardware``'s (through ``GpuType.hardware``), else the
catalogue's datasheet's (``GpuType.datasheet``: FP8 and FP4 peaks, and memory, bandwidth and
BF16 for a GPU the simulator lacks), read-only and null where neither states them; the
database stores only names and prices.
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
    memory_gb = serializers.SerializerMethodField(
        help_text="Memory in GB as the product names it (180 for a B200)."
    )
    fp8_tflops = serializers.SerializerMethodField(
        help_text="Dense FP8 tensor TFLOP/s (datasheet_source)."
    )
    fp4_tflops = serializers.SerializerMethodField(
        help_text="Dense FP4 tensor TFLOP/s (datasheet_source)."
    )
    datasheet_source = serializers.SerializerMethodField(
        help_text="Where the facts not from the simulator's GPU table come from."
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
            "memory_gb",
            "fp8_tflops",
            "fp4_tflops",
            "datasheet_source",
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

    def _fact(self, gpu, name: str):
        # agents.hardware's where it states the fact, else the catalogue's datasheet's.
        for source in (gpu.hardware, gpu.datasheet):
            value = getattr(source, name, None)
            if value is not None:
                return value
        return None

    def get_memory_bandwidth_gbps(self, gpu) -> int | None:
        tbps = self._fact(gpu, "bandwidth_tbps")
        return None if tbps is None else round(tbps * 1000)

    def get_bf16_tflops(self, gpu) -> float | None:
        return self._fact(gpu, "bf16_tflops")

    def get_memory_gb(self, gpu) -> int | None:
        return self._fact(gpu, "marketing_gb")

    def get_fp8_tflops(self, gpu) -> float | None:
        return self._fact(gpu, "fp8_tflops")

    def get_fp4_tflops(self, gpu) -> float | None:
        return self._fact(gpu, "fp4_tflops")

    def get_datasheet_source(self, gpu) -> str | None:
        return gpu.datasheet.source if gpu.datasheet else None

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
