"""The GPU catalogue every installation starts with.

Prices: USD per GPU-hour, from third-party copies of Runpod's price page, autumn 2026 (as
collected in the project's REFERENCE notes); ``None`` where no figure was found. The
provider's API replaces them when the catalogue is refreshed. The physical columns (memory,
bandwidth, BF16 TFLOP/s) are copied from ``agents.hardware``, the one place they are stated;
every calculation reads that module, not the columns.
"""

from __future__ import annotations

import datetime

from agents.hardware import gpu_profile

PRICE_SOURCE = "Runpod price page (third-party copies)"
PRICE_AS_OF = datetime.date(2026, 11, 1)

GPU_CATALOGUE = [
    # id, display name, secure $/h, community $/h, note
    ("NVIDIA H100 80GB HBM3", "H100 SXM 80GB", "3.99", "2.69", ""),
    ("NVIDIA H200", "H200 141GB", "4.59", None, "one price listed, cloud type not stated"),
    ("NVIDIA B200", "B200 180GB", "6.79", "5.98", ""),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", "1.79", "1.39", ""),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", None, None, "no price collected"),
    ("NVIDIA L40S", "L40S 48GB", "0.99", None, "one price listed, cloud type not stated"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090 24GB", "0.44", "0.31", ""),
]


def seed_gpu_catalogue(gpu_type_model) -> int:
    """Inserts the catalogue rows that are missing; existing rows (maybe refreshed or edited)
    are left alone. Returns how many were added. Takes the model class so that migrations can
    pass their historical model."""
    added = 0
    for gpu_id, name, secure, community, note in GPU_CATALOGUE:
        hardware = gpu_profile(gpu_id)
        _, created = gpu_type_model.objects.get_or_create(
            id=gpu_id,
            defaults={
                "display_name": name,
                "vram_gb": hardware.marketing_gb,  # the column's unit: the product name's GB
                "memory_bandwidth_gbps": round(hardware.bandwidth_tbps * 1000),
                "bf16_tflops": round(hardware.bf16_tflops),
                "price_secure_usd_hr": secure,
                "price_community_usd_hr": community,
                "price_source": f"{PRICE_SOURCE}; {note}" if note else PRICE_SOURCE,
                "price_as_of": PRICE_AS_OF,
            },
        )
        added += created
    return added
