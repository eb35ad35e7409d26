"""What a GPU costs an organization: its price per GPU-hour (its override, else the
catalogue's) and a pod's rate from it, each with where the figure comes from."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from runs.costs import pod_usd_per_hr
from runs.models import GpuPriceOverride, GpuType, Organization


@dataclass(frozen=True)
class GpuPrice:
    """USD per GPU-hour for one cloud type, and where that figure comes from."""

    usd_per_gpu_hour: Decimal | None
    source: str


def gpu_price(*, org: Organization, gpu_type: GpuType, cloud_type: str) -> GpuPrice:
    """The organization's override when it has one for this cloud type, else the catalogue's."""
    field = f"price_{cloud_type}_usd_hr"
    override = GpuPriceOverride.objects.filter(organization=org, gpu_type=gpu_type).first()
    if override is not None and getattr(override, field) is not None:
        return GpuPrice(
            getattr(override, field), f"organization price ({override.note or 'override'})"
        )
    catalogue = getattr(gpu_type, field)
    if catalogue is None:
        return GpuPrice(None, f"no {cloud_type} price known for {gpu_type.id}")
    return GpuPrice(catalogue, f"{gpu_type.price_source}, as of {gpu_type.price_as_of.isoformat()}")


def pod_rate_from_price(price: GpuPrice, gpu_count: int) -> tuple[Decimal | None, str]:
    """A pod's USD per hour at ``price`` per GPU-hour × ``gpu_count``, and where it comes from
    (None when no price is known)."""
    rate = (
        None
        if price.usd_per_gpu_hour is None
        else pod_usd_per_hr(gpu_usd_per_hr=price.usd_per_gpu_hour, gpu_count=gpu_count)
    )
    return rate, f"{price.source}; per GPU-hour × {gpu_count} GPU(s)"
