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
# A type agents.hardware has a profile for that the seed leaves out.
A100_40 = "NVIDIA A100-SXM4-40GB"
LISTED = FakeGpuType(A100_40, "A100 SXM", 40, Decimal("1.19"), Decimal("0.99"))
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
    assert A100_40 not in catalogue_before
    runpod([*DEFAULT_GPU_TYPES, LISTED])

    result = gpu_prices_refresh.apply().get()

    assert result["added"] == 1
    assert result["added_without_hardware"] == 0
    listed = GpuType.objects.get(id=A100_40)
    assert listed.display_name == "A100 SXM 40GB"  # Runpod's name and memory, as the seed names
    assert (listed.price_secure_usd_hr, listed.price_community_usd_hr) == (
        Decimal("1.19"),
        Decimal("0.99"),
    )
    today = timezone.now().date()
    assert listed.price_as_of == today
    assert listed.price_source == (
        f"{PRICE_SOURCE}; added to the catalogue by the daily refresh on {today.isoformat()}, "
        "listed with 40 GB"
    )
    # Its physical facts are agents.hardware's A100 40GB profile (memory as CUDA reports it).
    assert listed.hardware is not None and listed.hardware.marketing_gb == 40
    # Nothing else entered the catalogue.
    assert set(GpuType.objects.values_list("id", flat=True)) == catalogue_before | {A100_40}
    # Audited in every organization's log, by the refresh, with the new row.
    events = creations(A100_40)
    assert [e.organization.slug for e in events] == ["acme", "globex"]
    for event in events:
        assert event.actor is None and event.actor_via == "gpu price refresh"
        assert event.after["display_name"] == "A100 SXM 40GB"
        assert event.after["price_secure_usd_hr"] == "1.19"
        assert event.after["price_community_usd_hr"] == "0.99"


def test_running_the_refresh_twice_adds_it_once_and_keeps_the_mark(runpod, alice, charlie):
    runpod([*DEFAULT_GPU_TYPES, LISTED])
    gpu_prices_refresh.apply().get()
    GpuType.objects.filter(id=A100_40).update(price_as_of=datetime.date(2025, 6, 1))
    runpod([*DEFAULT_GPU_TYPES, FakeGpuType(A100_40, "A100 SXM", 40, Decimal("1.09"), None)])

    again = gpu_prices_refresh.apply().get()

    assert again["added"] == 0
    listed = GpuType.objects.get(id=A100_40)
    # A later pass refreshes its price like any known type's, the community one kept as the
    # last known, and the "added" note stays.
    assert (listed.price_secure_usd_hr, listed.price_community_usd_hr) == (
        Decimal("1.09"),
        Decimal("0.99"),
    )
    assert listed.price_as_of == timezone.now().date()
    assert listed.price_source.startswith(PRICE_SOURCE + "; added to the catalogue")
    assert "listed with 40 GB" in listed.price_source
    assert len(creations(A100_40)) == 2  # one per organization, from the first pass only


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
    unpriced = FakeGpuType("NVIDIA H100 NVL", "H100 NVL", 94, None, None)
    runpod([*DEFAULT_GPU_TYPES, unpriced])

    result = gpu_prices_refresh.apply().get()

    assert result["added"] == 0
    assert result["listed_without_price"] == 1
    assert not GpuType.objects.filter(id=unpriced.id).exists()
    assert not creations(unpriced.id)


def test_a_failed_listing_adds_nothing_and_keeps_the_price_pass(runpod, alice, monkeypatch):
    h200 = next(g for g in DEFAULT_GPU_TYPES if g.id == "NVIDIA H200")
    listing = [g for g in DEFAULT_GPU_TYPES if g is not h200]
    fake = runpod([*listing, FakeGpuType(h200.id, "H200 SXM", 141, Decimal("9.99"), None), LISTED])
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
    assert not GpuType.objects.filter(id=A100_40).exists()
    assert not creations(A100_40)
    assert GpuType.objects.count() == known
    # What the pass priced before the listing failed stays priced.
    assert GpuType.objects.get(id=h200.id).price_secure_usd_hr == Decimal("9.99")
