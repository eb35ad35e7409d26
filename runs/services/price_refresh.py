"""Keeping the GPU price catalogue current from Runpod's published prices.

Guarantees of ``gpu_prices_refresh``:
- every GPU type in the catalogue is asked for once; a price Runpod lists replaces the
  catalogue's, with ``price_source`` and ``price_as_of`` saying where and when it came from;
- a cloud Runpod lists no price for right now (no capacity there, or not offered) keeps the
  catalogue's last known price — out of stock is not a price change, and dropping it would
  make every estimate on that GPU unknown;
- a GPU type Runpod does not know, or lists in neither cloud, is left as it is and reported;
- one failed call (rate limit, outage) stops the pass and changes nothing more; what was
  updated before it stays updated (each GPU type is its own conditional write), and the next
  pass tries again;
- the operator's key (``BENCHSITE_RUNPOD_PRICE_KEY``) is used, never an organization's; with
  none set the pass does nothing and says so. Organizations' own price overrides are never
  touched.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal

from django.utils import timezone

from runs.models import GpuType
from runs.providers.base import ProviderError

logger = logging.getLogger(__name__)

PRICE_SOURCE = "Runpod API (gpuTypes securePrice / communityPrice)"


@dataclass
class PriceRefreshReport:
    """What one pass did (GPU type ids by outcome), for logs, the task result and tests."""

    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    unknown_to_provider: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    error: str = ""
    skipped: str = ""


def _same(old: Decimal | None, new: Decimal | None) -> bool:
    return (old is None and new is None) or (
        old is not None and new is not None and Decimal(old) == new
    )


def gpu_prices_refresh(*, provider) -> PriceRefreshReport:
    """One pass over the catalogue with ``provider`` (a ``RunpodProvider``, or ``None`` when
    no key is configured)."""
    report = PriceRefreshReport()
    if provider is None:
        report.skipped = "No BENCHSITE_RUNPOD_PRICE_KEY is set; the catalogue keeps its prices."
        logger.info(report.skipped)
        return report
    today = timezone.now().date()
    for gpu in GpuType.objects.order_by("id"):
        try:
            listed = provider.prices(gpu.id)
        except ProviderError as exc:
            report.error = f"{gpu.id}: {exc}"
            logger.warning("GPU price refresh stopped: %s", report.error)
            return report
        if listed is None:
            report.unknown_to_provider.append(gpu.id)
            continue
        listed_secure, listed_community = listed
        if listed_secure is None and listed_community is None:
            report.unlisted.append(gpu.id)  # offered in neither cloud right now
            continue
        secure = listed_secure if listed_secure is not None else gpu.price_secure_usd_hr
        community = listed_community if listed_community is not None else gpu.price_community_usd_hr
        same = _same(gpu.price_secure_usd_hr, secure) and _same(
            gpu.price_community_usd_hr, community
        )
        # Conditional on the prices read, so two passes at once never write a stale pair; an
        # unchanged price is written too, to record that it was confirmed today.
        changed = GpuType.objects.filter(
            id=gpu.id,
            price_secure_usd_hr=gpu.price_secure_usd_hr,
            price_community_usd_hr=gpu.price_community_usd_hr,
        ).update(
            price_secure_usd_hr=secure,
            price_community_usd_hr=community,
            price_source=PRICE_SOURCE,
            price_as_of=today,
            updated_at=timezone.now(),
        )
        if same:
            report.unchanged.append(gpu.id)
        elif changed:
            report.updated.append(gpu.id)
            logger.info(
                "GPU price %s: secure %s → %s, community %s → %s",
                gpu.id,
                gpu.price_secure_usd_hr,
                secure,
                gpu.price_community_usd_hr,
                community,
            )
    return report
