"""The GPU price catalogue refreshed from Runpod (issue 6): the real ``runpod`` SDK against
the fake Runpod API, through the Celery task with the operator's key."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from runs.models import GpuPriceOverride, GpuType
from runs.services.price_refresh import PRICE_SOURCE
from runs.tasks import gpu_prices_refresh
from tests.fakes.runpod_api import DEFAULT_GPU_TYPES, FakeGpuType, FakeRunpodApi

pytestmark = pytest.mark.django_db

OPERATOR_KEY = "rpa_operator_prices_0123456789abcdef"
H100, A100, L40S = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S"
B300 = "NVIDIA B300 SXM6 AC"
PCIE = "NVIDIA A100 80GB PCIe"  # in the catalogue, not at the fake Runpod
OLD_DAY = datetime.date(2025, 6, 1)


def runpod_listing(**changes: tuple[str | None, str | None]) -> list[FakeGpuType]:
    """The fake's GPU types with (secure, community) prices changed for some of them."""
    listing = []
    for gpu in DEFAULT_GPU_TYPES:
        if gpu.id in changes:
            secure, community = changes[gpu.id]
            gpu = FakeGpuType(
                gpu.id,
                gpu.display_name,
                gpu.memory_gb,
                Decimal(secure) if secure else None,
                Decimal(community) if community else None,
            )
        listing.append(gpu)
    return listing


@pytest.fixture
def runpod(settings, monkeypatch):
    def serve(listing):
        fake = FakeRunpodApi(api_keys=(OPERATOR_KEY,), gpu_types=listing).start()
        fake.point_sdk_at_me(monkeypatch)
        settings.BENCHSITE_RUNPOD_PRICE_KEY = OPERATOR_KEY
        started.append(fake)
        return fake

    started: list[FakeRunpodApi] = []
    GpuType.objects.update(price_as_of=OLD_DAY)
    yield serve
    for fake in started:
        fake.stop()


def prices(gpu_id: str) -> tuple[Decimal | None, Decimal | None]:
    gpu = GpuType.objects.get(id=gpu_id)
    return gpu.price_secure_usd_hr, gpu.price_community_usd_hr


def test_new_prices_replace_the_catalogues_and_say_where_they_came_from(runpod):
    runpod(runpod_listing(**{H100: ("4.25", "2.89")}))
    result = gpu_prices_refresh.apply().get()
    assert prices(H100) == (Decimal("4.25"), Decimal("2.89"))
    h100 = GpuType.objects.get(id=H100)
    assert (h100.price_source, h100.price_as_of) == (PRICE_SOURCE, timezone.now().date())
    # Unchanged prices are confirmed (dated today), not rewritten.
    assert prices(A100) == (Decimal("1.79"), Decimal("1.39"))
    assert GpuType.objects.get(id=A100).price_as_of == timezone.now().date()
    assert result["updated"] == 1 and result["error"] == ""
    assert result["unknown_to_provider"] >= 1  # PCIe A100 and the others the fake lacks
    assert GpuType.objects.get(id=PCIE).price_as_of == OLD_DAY


def test_a_cloud_with_no_listed_price_keeps_the_last_known_one(runpod):
    # Runpod lists the L40S in neither cloud right now, the H100 only in the secure cloud.
    runpod(runpod_listing(**{L40S: (None, None), H100: ("4.10", None)}))
    before_l40s = GpuType.objects.get(id=L40S)
    result = gpu_prices_refresh.apply().get()
    assert prices(H100) == (Decimal("4.10"), Decimal("2.69"))  # community price kept
    after_l40s = GpuType.objects.get(id=L40S)
    assert (after_l40s.price_secure_usd_hr, after_l40s.price_as_of) == (
        before_l40s.price_secure_usd_hr,
        OLD_DAY,
    )
    assert result["unlisted"] == 1


def test_a_failed_call_changes_nothing_more_and_reports_it(runpod):
    fake = runpod(runpod_listing(**{H100: ("9.99", "9.99")}))
    fake.inject("rate_limited", times=None)
    result = gpu_prices_refresh.apply().get()
    assert "Too Many Requests" in result["error"] and result["updated"] == 0
    assert prices(H100) == (Decimal("3.99"), Decimal("2.69"))
    assert OPERATOR_KEY not in result["error"]


def test_only_the_operators_key_is_used_and_overrides_stay(runpod, alice):
    override = GpuPriceOverride.objects.create(
        organization=alice.org, gpu_type_id=H100, price_secure_usd_hr=Decimal("2.00")
    )
    fake = runpod(runpod_listing(**{H100: ("4.25", "2.89")}))
    gpu_prices_refresh.apply().get()
    assert {request.api_key for request in fake.requests} == {OPERATOR_KEY}
    override.refresh_from_db()
    assert override.price_secure_usd_hr == Decimal("2.00")


def test_without_an_operator_key_nothing_changes(settings):
    settings.BENCHSITE_RUNPOD_PRICE_KEY = ""
    before = list(GpuType.objects.values_list("id", "price_secure_usd_hr", "price_as_of"))
    result = gpu_prices_refresh.apply().get()
    assert "BENCHSITE_RUNPOD_PRICE_KEY" in result["skipped"]
    assert list(GpuType.objects.values_list("id", "price_secure_usd_hr", "price_as_of")) == before


def test_the_refresh_is_on_the_beat_schedule(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["gpu-prices-refresh"]
    assert entry["task"] == "runs.tasks.gpu_prices_refresh"
    assert entry["task"] in gpu_prices_refresh.app.tasks


def test_the_seeded_b300_price_is_replaced_by_the_refresh(runpod):
    # Seeded without a key (runs/gpu_catalogue_seed.py), replaced by Runpod's listed price.
    assert prices(B300) == (Decimal("7.89"), Decimal("6.94"))
    listed = FakeGpuType(B300, "B300", 288, Decimal("8.25"), Decimal("7.10"))
    runpod([*DEFAULT_GPU_TYPES, listed])
    result = gpu_prices_refresh.apply().get()
    assert prices(B300) == (Decimal("8.25"), Decimal("7.10"))
    assert GpuType.objects.get(id=B300).price_source == PRICE_SOURCE
    assert result["added"] == 0 and result["error"] == ""
