"""The GPU catalogue every installation starts with.

Prices: USD per GPU-hour, from third-party copies of Runpod's price page, autumn 2026 (as
collected in the project's REFERENCE notes); ``None`` where no figure was found. The
provider's API replaces them when the catalogue is refreshed. A GPU's physical facts (memory,
bandwidth, BF16 TFLOP/s) are not stored: ``GpuType.hardware`` reads them from
``agents.hardware``. Every id seeded here is one that module knows (tested); a type the daily
refresh adds from Runpod's listing may not be, and then has no hardware facts
(``runs.services.price_refresh``).
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


# The physical columns GpuType had until migration 0015 removed them.
RETIRED_PHYSICAL_COLUMNS = ("vram_gb", "memory_bandwidth_gbps", "bf16_tflops")


def retired_physical_columns(gpu_id: str) -> dict[str, int]:
    """The values those columns held (the product name's GB, GB/s, dense BF16 TFLOP/s), from
    ``agents.hardware``; zeros for a GPU it does not know. Only for the migrations' historical
    models: the one that seeds (0002) still has the columns, and undoing 0015 refills them."""
    try:
        hardware = gpu_profile(gpu_id)
    except ValueError:
        return dict.fromkeys(RETIRED_PHYSICAL_COLUMNS, 0)
    return {
        "vram_gb": hardware.marketing_gb,
        "memory_bandwidth_gbps": round(hardware.bandwidth_tbps * 1000),
        "bf16_tflops": round(hardware.bf16_tflops),
    }


def seed_gpu_catalogue(gpu_type_model) -> int:
    """Inserts the catalogue rows that are missing; existing rows (maybe refreshed or edited)
    are left alone. Returns how many were added. Takes the model class so that migrations can
    pass their historical model."""
    stores_physical = any(
        field.name in RETIRED_PHYSICAL_COLUMNS for field in gpu_type_model._meta.fields
    )
    added = 0
    for gpu_id, name, secure, community, note in GPU_CATALOGUE:
        physical = retired_physical_columns(gpu_id) if stores_physical else {}
        _, created = gpu_type_model.objects.get_or_create(
            id=gpu_id,
            defaults=physical
            | {
                "display_name": name,
                "price_secure_usd_hr": secure,
                "price_community_usd_hr": community,
                "price_source": f"{PRICE_SOURCE}; {note}" if note else PRICE_SOURCE,
                "price_as_of": PRICE_AS_OF,
            },
        )
        added += created
    return added
