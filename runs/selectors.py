"""Reads that more than one caller needs. Every function takes an organization (or a
membership) so that no read can wander into another tenant's rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal

from django.db.models import Sum

from runs.costs import (
    DEFAULT_SERVING_WINDOW_SECONDS,
    TrialCost,
    month_bounds_utc,
    pod_usd_per_hr,
    round_usd,
    trial_cost_per_million_output_tokens,
)
from runs.frozen_job import run_cloud_type, run_engine, run_is_simulated
from runs.models import GpuPriceOverride, GpuType, Measurement, Organization, Run, Trial


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


def org_month_spend_usd(*, org: Organization, month: date) -> Decimal:
    """What the organization's runs started in ``month`` (its first day, UTC) cost, exactly.

    Each run's ``cost_usd`` counts whole in the month of its ``created_at`` (the month
    ``runs.costs.month_start`` names), never prorated; another organization's runs never
    count.
    """
    start, end = month_bounds_utc(month)
    total = Run.objects.filter(
        organization=org, created_at__gte=start, created_at__lt=end
    ).aggregate(total=Sum("cost_usd"))["total"]
    return round_usd(total if total is not None else Decimal(0))


def _level_of(measurement: Measurement) -> dict:
    # The stored columns are authoritative for the level; the result's own keys may repeat it.
    level = {
        k: v for k, v in measurement.result.items() if k not in ("concurrency", "request_rate")
    }
    if measurement.concurrency is not None:
        level["concurrency"] = measurement.concurrency
    else:
        level["request_rate"] = (
            "inf" if measurement.request_rate_infinite else measurement.request_rate
        )
    return level


def trial_costs(
    *, trial: Trial, serving_window_seconds: Decimal = DEFAULT_SERVING_WINDOW_SECONDS
) -> TrialCost:
    """The trial's $ per 1M output tokens at its best level under the SLOs, steady and with
    cold start amortized (``runs.costs.trial_cost_per_million_output_tokens``).

    Priced at the pod's billed rate when the provider gave one (``Run.price_usd_hr``), else
    at the organization's price for the GPUs × their count the run was started with. Reads
    only rows of the trial's own organization.
    """
    run = trial.run
    rate: Decimal | None
    if run.price_usd_hr is not None:
        rate, source = run.price_usd_hr, "the pod's billed rate"
    else:
        engine = run_engine(run)
        price = gpu_price(
            org=run.organization,
            gpu_type=GpuType.objects.get(id=engine.gpu_type),
            cloud_type=run_cloud_type(run),
        )
        rate, source = pod_rate_from_price(price, engine.gpu_count)
    return trial_cost_per_million_output_tokens(
        [_level_of(measurement) for measurement in trial.measurements.all()],
        pod_usd_per_hr=rate,
        cold_start=trial.cold_start,
        price_source=source,
        serving_window_seconds=serving_window_seconds,
        simulated=run_is_simulated(run),
    )
