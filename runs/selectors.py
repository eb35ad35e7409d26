"""Reads that more than one caller needs. Every function takes an organization (or a
membership) so that no read can wander into another tenant's rows."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db.models import QuerySet

from runs.models import AuditEvent, GpuPriceOverride, GpuType, Organization


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


def gpu_types_with_prices(*, org: Organization) -> list[tuple[GpuType, GpuPriceOverride | None]]:
    """The whole catalogue with the organization's override (or None) beside each type."""
    overrides = {o.gpu_type_id: o for o in GpuPriceOverride.objects.filter(organization=org)}
    return [(gpu, overrides.get(gpu.id)) for gpu in GpuType.objects.all()]


def audit_events(*, org: Organization) -> QuerySet[AuditEvent]:
    """The organization's audit log, newest first."""
    return AuditEvent.objects.filter(organization=org).order_by("-seq")
