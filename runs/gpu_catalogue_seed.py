"""The GPU catalogue every installation starts with.

Prices: USD per GPU-hour, from third-party copies of Runpod's price page, autumn 2026 (as
collected in the project's REFERENCE notes); ``None`` where no figure was found. The
provider's API replaces them when the catalogue is refreshed. Bandwidth and BF16 dense
TFLOP/s are the vendors' datasheet figures, used only by the pre-run estimate.
"""

from __future__ import annotations

import datetime

PRICE_SOURCE = "Runpod price page (third-party copies)"
PRICE_AS_OF = datetime.date(2026, 11, 1)

GPU_CATALOGUE = [
    # id, display name, VRAM GB, GB/s, BF16 TFLOP/s, secure $/h, community $/h, note
    ("NVIDIA H100 80GB HBM3", "H100 SXM 80GB", 80, 3350, 989, "3.99", "2.69", ""),
    (
        "NVIDIA H200",
        "H200 141GB",
        141,
        4800,
        989,
        "4.59",
        None,
        "one price listed, cloud type not stated",
    ),
    ("NVIDIA B200", "B200 180GB", 180, 8000, 2250, "6.79", "5.98", ""),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", 80, 2039, 312, "1.79", "1.39", ""),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 80, 1935, 312, None, None, "no price collected"),
    (
        "NVIDIA L40S",
        "L40S 48GB",
        48,
        864,
        362,
        "0.99",
        None,
        "one price listed, cloud type not stated",
    ),
    ("NVIDIA GeForce RTX 4090", "RTX 4090 24GB", 24, 1008, 165, "0.44", "0.31", ""),
]


def seed_gpu_catalogue(gpu_type_model) -> int:
    """Inserts the catalogue rows that are missing; existing rows (maybe refreshed or edited)
    are left alone. Returns how many were added. Takes the model class so that migrations can
    pass their historical model."""
    added = 0
    for gpu_id, name, vram, bandwidth, tflops, secure, community, note in GPU_CATALOGUE:
        _, created = gpu_type_model.objects.get_or_create(
            id=gpu_id,
            defaults={
                "display_name": name,
                "vram_gb": vram,
                "memory_bandwidth_gbps": bandwidth,
                "bf16_tflops": tflops,
                "price_secure_usd_hr": secure,
                "price_community_usd_hr": community,
                "price_source": f"{PRICE_SOURCE}; {note}" if note else PRICE_SOURCE,
                "price_as_of": PRICE_AS_OF,
            },
        )
        added += created
    return added
