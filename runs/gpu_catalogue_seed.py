"""The GPU catalogue every installation starts with, and the facts the catalogue states
beside ``agents.hardware``'s.

Prices: USD per GPU-hour, from third-party copies of Runpod's price page and its ``gpuTypes``
listing, autumn 2026; for a GPU Runpod does not offer (GB200), another cloud's on-demand
rate, named in its note; ``None`` where no figure was found. The provider's API replaces them
when the catalogue is refreshed (``runs.services.price_refresh``, which needs the operator's
key); a type Runpod does not list keeps its seeded price.

Physical facts are not stored in the database. A GPU's memory, bandwidth and BF16 TFLOP/s
are ``agents.hardware``'s (``GpuType.hardware``), the simulator's own table. What that
table does not state is in ``GPU_DATASHEETS`` here (``GpuType.datasheet``): the sources of
the Blackwell figures, and any fact of a GPU the simulator has no profile of. No fact is
stated in both places (tested). Every seeded id is known to one of the two; a type the daily
refresh adds from Runpod's listing may be known to neither, and then has no hardware facts.

AMD GPUs (MI300X, MI355X) are not seeded: the agent's image is built on the CUDA
``vllm/vllm-openai`` image only (docker/agent.Dockerfile), so a ROCm pod could not run it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from agents.hardware import gpu_profile

PRICE_SOURCE = "Runpod price page (third-party copies)"
PRICE_AS_OF = datetime.date(2026, 11, 1)

# CoreWeave's price page as transcribed on 2026-09-20 (api-evangelist/coreweave,
# plans/coreweave-plans-pricing.yml): "NVIDIA GB200 NVL72 (on-demand, North America)" $42.00
# an hour for 4 GPUs, $10.50 per GPU-hour (the page's single-GPU inference price too).
GB200_PRICE_NOTE = (
    "not offered by Runpod; CoreWeave's on-demand GB200 NVL72 rate, $42.00/h for 4 GPUs "
    "(coreweave.com/pricing as transcribed 2026-09-20), until the refresh or an "
    "organization price replaces it"
)
# What the catalogue said of GB200 before it had that price (migration 0043 updates it).
GB200_UNPRICED_NOTE = "not offered by Runpod; set an organization price"

GPU_CATALOGUE = [
    # id, display name, secure $/h, community $/h, note
    ("NVIDIA H100 80GB HBM3", "H100 SXM 80GB", "3.99", "2.69", ""),
    ("NVIDIA H200", "H200 141GB", "4.59", None, "one price listed, cloud type not stated"),
    ("NVIDIA B200", "B200 180GB", "6.79", "5.98", ""),
    (
        "NVIDIA B300 SXM6 AC",
        "B300 288GB",
        "7.89",
        "6.94",
        "Runpod gpuTypes securePrice / communityPrice as read on 2026-08-27, copied in a public "
        "repository's RunPod GPU catalogue notes",
    ),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", "1.79", "1.39", ""),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", None, None, "no price collected"),
    ("NVIDIA L40S", "L40S 48GB", "0.99", None, "one price listed, cloud type not stated"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090 24GB", "0.44", "0.31", ""),
    # Not among Runpod's GPU types (docs.runpod.io/references/gpu-types): seeded with another
    # cloud's on-demand rate, which the refresh replaces once Runpod lists the type.
    (
        "NVIDIA GB200",
        "GB200 186GB",
        "10.50",
        None,
        GB200_PRICE_NOTE,
    ),
    (
        "NVIDIA GB300",
        "GB300 279GB",
        None,
        None,
        "not offered by Runpod and no on-demand price published (CoreWeave: 'Contact sales'); "
        "set an organization price",
    ),
]


@dataclass(frozen=True)
class GpuDatasheet:
    """What the catalogue states of a GPU beside ``agents.hardware``: dense (no sparsity)
    tensor TFLOP/s per precision, and for a GPU that module lacks its memory (GB, the
    product's) and peak bandwidth (TB/s); None where ``agents.hardware`` states it or no
    source gives it. ``source`` names where each figure comes from."""

    source: str
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    bf16_tflops: float | None = None
    marketing_gb: int | None = None
    bandwidth_tbps: float | None = None


# NVIDIA's own Blackwell datasheets were not among the stored sources; the figures are the
# per-GPU dense ones as third parties copied them from NVIDIA's HGX / NVL72 specifications.
GPU_DATASHEETS = {
    # Their FP8 and FP4 peaks are agents.hardware's (gpus.py, with these sources).
    "NVIDIA B200": GpuDatasheet(
        source="glennklockwood.com/garden/processors/B200, HGX B200 at 1,000 W, dense matrix "
        "TFLOP/s: FP8 4,500, FP4 9,000 (BF16 2,250 as agents.hardware states)",
    ),
    "NVIDIA B300 SXM6 AC": GpuDatasheet(
        source="glennklockwood.com/garden/processors/B300, HGX B300, dense matrix TFLOP/s: "
        "FP8 4,500, FP4 13,125 (verda.com 'GB300 NVL72 architecture' lists 14 PFLOPS dense "
        "FP4 for B300; the lower figure is kept)",
    ),
    # Every figure of theirs is agents.hardware's (gpus.py, with these sources).
    "NVIDIA GB200": GpuDatasheet(
        source="glennklockwood.com/garden/processors/B200, the GB200 variant at 1,200 W, dense "
        "matrix TFLOP/s: BF16 2,500, FP8 5,000, FP4 10,000; 8 TB/s per GPU (same page); "
        "186 GB HBM3e per GPU (MLCommons inference v6.1, Crusoe GB200-NVL72 system "
        "description, accelerator_memory_capacity)",
    ),
    "NVIDIA GB300": GpuDatasheet(
        source="verda.com/blog/gb300-nvl72-architecture, per-GPU specifications without "
        "sparsity: FP4 15 PFLOPS, FP8 5 PFLOPS, FP16/BF16 2.5 PFLOPS, 279 GB HBM3E, 8 TB/s "
        "(the rack's 20 TB and 576 TB/s over 72 GPUs agree: glennklockwood.com B300 page)",
    ),
}


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
