"""GPU types Runpod lists that the catalogue lacks (issue 18: "B300 enters the catalogue with
memory and price on the daily refresh"): the real ``runpod`` SDK against the fake Runpod API,
through the Celery task with the operator's key."""

from __future__ import annotations

import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from runs.models import AuditEvent, GpuType
from runs.services.price_refresh import PRICE_SOURCE
from runs.tasks import gpu_prices_refresh
from tests.fakes.runpod_api import DEFAULT_GPU_TYPES, FakeGpuType, FakeRunpodApi

pytestmark = pytest.mark.django_db

OPERATOR_KEY = "rpa_operator_prices_0123456789abcdef"
B300_ID = "NVIDIA B300 SXM6 AC"
B300 = FakeGpuType(B300_ID, "B300", 288, Decimal("7.89"), Decimal("6.94"))
# A type agents.hardware has no profile for.
PRO_6000 = FakeGpuType(
    "NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", 96, None, Decimal("1.79")
)


@pytest.fixture
def runpod(settings, monkeypatch):
    def serve(listing):
        fake = FakeRunpodApi(api_keys=(OPERATOR_KEY,), gpu_types=listing).start()
        fake.point_sdk_at_me(monkeypatch)
        settings.BENCHSITE_RUNPOD_PRICE_KEY = OPERATOR_KEY
        started.append(fake)
        return fake

    started: list[FakeRunpodApi] = []
    yield serve
    for fake in started:
        fake.stop()


def creations(gpu_id: str) -> list[AuditEvent]:
    return list(
        AuditEvent.objects.filter(event="gpu_type.create", target_id=gpu_id).order_by(
            "organization__slug"
        )
    )


def test_it_adds_a_listed_type_with_its_memory_and_price_marked_new(runpod, alice, charlie):
    catalogue_before = set(GpuType.objects.values_list("id", flat=True))
    assert B300_ID not in catalogue_before
    runpod([*DEFAULT_GPU_TYPES, B300])

    result = gpu_prices_refresh.apply().get()

    assert result["added"] == 1
    assert result["added_without_hardware"] == 0
    b300 = GpuType.objects.get(id=B300_ID)
    assert b300.display_name == "B300 288GB"  # Runpod's name and memory, as the seed names
    assert (b300.price_secure_usd_hr, b300.price_community_usd_hr) == (
        Decimal("7.89"),
        Decimal("6.94"),
    )
    today = timezone.now().date()
    assert b300.price_as_of == today
    assert b300.price_source == (
        f"{PRICE_SOURCE}; added to the catalogue by the daily refresh on {today.isoformat()}, "
        "listed with 288 GB"
    )
    # Its physical facts are agents.hardware's B300 profile (memory as CUDA reports it).
    assert b300.hardware is not None and b300.hardware.marketing_gb == 288
    # Nothing else entered the catalogue.
    assert set(GpuType.objects.values_list("id", flat=True)) == catalogue_before | {B300_ID}
    # Audited in every organization's log, by the refresh, with the new row.
    events = creations(B300_ID)
    assert [e.organization.slug for e in events] == ["acme", "globex"]
    for event in events:
        assert event.actor is None and event.actor_via == "gpu price refresh"
        assert event.after["display_name"] == "B300 288GB"
        assert event.after["price_secure_usd_hr"] == "7.89"
        assert event.after["price_community_usd_hr"] == "6.94"


def test_running_the_refresh_twice_adds_it_once_and_keeps_the_mark(runpod, alice, charlie):
    runpod([*DEFAULT_GPU_TYPES, B300])
    gpu_prices_refresh.apply().get()
    GpuType.objects.filter(id=B300_ID).update(price_as_of=datetime.date(2025, 6, 1))
    runpod([*DEFAULT_GPU_TYPES, FakeGpuType(B300_ID, "B300", 288, Decimal("7.49"), None)])

    again = gpu_prices_refresh.apply().get()

    assert again["added"] == 0
    b300 = GpuType.objects.get(id=B300_ID)
    # A later pass refreshes its price like any known type's, the community one kept as the
    # last known, and the "added" note stays.
    assert (b300.price_secure_usd_hr, b300.price_community_usd_hr) == (
        Decimal("7.49"),
        Decimal("6.94"),
    )
    assert b300.price_as_of == timezone.now().date()
    assert b300.price_source.startswith(PRICE_SOURCE + "; added to the catalogue")
    assert "listed with 288 GB" in b300.price_source
    assert len(creations(B300_ID)) == 2  # one per organization, from the first pass only


def test_a_type_without_a_simulator_profile_enters_and_is_reported_so(runpod, alice):
    runpod([*DEFAULT_GPU_TYPES, PRO_6000])

    result = gpu_prices_refresh.apply().get()

    assert result["added"] == 1
    assert result["added_without_hardware"] == 1
    pro = GpuType.objects.get(id=PRO_6000.id)
    assert pro.display_name == "RTX PRO 6000 96GB"
    assert (pro.price_secure_usd_hr, pro.price_community_usd_hr) == (None, Decimal("1.79"))
    assert pro.hardware is None  # the site's pages and estimates say "no hardware facts"
    assert GpuType.by_memory()[-1] == pro  # unknown memory: listed last


def test_a_listed_type_with_no_price_in_either_cloud_is_not_added(runpod, alice):
    unpriced = FakeGpuType("NVIDIA GB300", "GB300", 279, None, None)
    runpod([*DEFAULT_GPU_TYPES, unpriced])

    result = gpu_prices_refresh.apply().get()

    assert result["added"] == 0
    assert result["listed_without_price"] == 1
    assert not GpuType.objects.filter(id=unpriced.id).exists()
    assert not creations(unpriced.id)


def test_a_failed_listing_adds_nothing_and_keeps_the_price_pass(runpod, alice, monkeypatch):
    h200 = next(g for g in DEFAULT_GPU_TYPES if g.id == "NVIDIA H200")
    listing = [g for g in DEFAULT_GPU_TYPES if g is not h200]
    fake = runpod([*listing, FakeGpuType(h200.id, "H200 SXM", 141, Decimal("9.99"), None), B300])
    answer = fake.handle

    def listing_rate_limited(api_key, body):
        # The listing is the one gpuTypes query without an id: Runpod answers it 429.
        if b"gpuTypes" in body and b"input" not in body:
            fake.inject("rate_limited", operation="gpuTypes")
        return answer(api_key, body)

    monkeypatch.setattr(fake, "handle", listing_rate_limited)
    known = GpuType.objects.count()

    result = gpu_prices_refresh.apply().get()

    assert result["added"] == 0
    assert result["error"].startswith("listing GPU types: ")
    assert [r.status for r in fake.requests if r.fault] == [429]
    assert not GpuType.objects.filter(id=B300_ID).exists()
    assert not creations(B300_ID)
    assert GpuType.objects.count() == known
    # What the pass priced before the listing failed stays priced.
    assert GpuType.objects.get(id=h200.id).price_secure_usd_hr == Decimal("9.99")
