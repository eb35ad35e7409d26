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
  touched;
- a GPU type Runpod lists that the catalogue lacks is added, with Runpod's display name and
  memory (its display name reads like the seed's, "B300 288GB") and its listed prices, once
  (``runs.services.catalogue.gpu_type_add_listed``): audited as ``gpu_type.create`` in every
  organization's log, logged as a warning, reported under ``added``, and marked new in its
  ``price_source`` ("added to the catalogue by the daily refresh on <day>, listed with N GB"),
  a mark later passes keep. A listed type with a price in neither cloud is not added
  (``listed_without_price``). Its physical facts still come from ``agents.hardware``: a type
  that module lacks is reported under ``added_without_hardware``, and the site says it has
  no hardware facts for it wherever it needs them (estimates, the API's and admin's memory).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal

from django.utils import timezone

from agents.hardware import gpu_profile
from runs.actors import Actor
from runs.errors import DomainValidationError
from runs.models import GpuType
from runs.providers.base import ProviderError
from runs.services.catalogue import gpu_type_add_listed

logger = logging.getLogger(__name__)

PRICE_SOURCE = "Runpod API (gpuTypes securePrice / communityPrice)"
# Starts the note a type added by a pass carries in its price_source, kept by later passes.
ADDED_NOTE = "; added to the catalogue by the daily refresh on "
ACTOR = Actor.system("gpu price refresh")


@dataclass
class PriceRefreshReport:
    """What one pass did (GPU type ids by outcome), for logs, the task result and tests."""

    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    unknown_to_provider: list[str] = field(default_factory=list)
    unlisted: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    added_without_hardware: list[str] = field(default_factory=list)
    listed_without_price: list[str] = field(default_factory=list)
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
            price_source=PRICE_SOURCE + _added_note(gpu.price_source),
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
    _add_listed_types(provider=provider, report=report, today=today)
    return report


def _added_note(price_source: str) -> str:
    """The "added by the daily refresh" note of a price source, or ""."""
    at = price_source.find(ADDED_NOTE)
    return price_source[at:] if at >= 0 else ""


def _add_listed_types(*, provider, report: PriceRefreshReport, today) -> None:
    """Adds the GPU types Runpod lists that the catalogue lacks (see the module docstring);
    a failed call stops here, as it stops the price pass."""
    try:
        listed = provider.gpu_types()
    except ProviderError as exc:
        report.error = f"listing GPU types: {exc}"
        logger.warning("GPU price refresh stopped: %s", report.error)
        return
    known = set(GpuType.objects.values_list("id", flat=True))
    for gpu in listed:
        if gpu.id in known:
            continue
        try:
            prices = provider.prices(gpu.id)
        except ProviderError as exc:
            report.error = f"{gpu.id}: {exc}"
            logger.warning("GPU price refresh stopped: %s", report.error)
            return
        secure, community = prices or (None, None)
        if secure is None and community is None:
            report.listed_without_price.append(gpu.id)
            continue
        name = gpu.display_name
        if not name.upper().endswith("GB"):
            name = f"{name} {gpu.memory_gb}GB"
        note = f"{ADDED_NOTE}{today.isoformat()}, listed with {gpu.memory_gb} GB"
        try:
            added = gpu_type_add_listed(
                gpu_id=gpu.id,
                display_name=name,
                price_secure_usd_hr=secure,
                price_community_usd_hr=community,
                price_source=PRICE_SOURCE + note,
                price_as_of=today,
                actor=ACTOR,
            )
        except DomainValidationError as exc:  # a name or price the catalogue cannot hold
            logger.warning("GPU type %s listed by Runpod was not added: %s", gpu.id, exc)
            continue
        if added is None:
            continue  # another pass added it a moment ago
        report.added.append(gpu.id)
        try:
            gpu_profile(gpu.id)
        except ValueError:
            report.added_without_hardware.append(gpu.id)
        logger.warning(
            "New GPU type in the catalogue from Runpod's listing: %s (%s, %s GB), secure %s, "
            "community %s%s",
            gpu.id,
            name,
            gpu.memory_gb,
            secure,
            community,
            "" if gpu.id not in report.added_without_hardware else "; no hardware facts",
        )
