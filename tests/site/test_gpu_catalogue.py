"""The GPU catalogue stores names and prices only: a GPU's physical facts are
agents.hardware's, read through GpuType.hardware by the API and the pages (issue 15)."""

from __future__ import annotations

import datetime
import importlib
from decimal import Decimal

import pytest
from django.apps import apps
from django.urls import reverse

from agents.hardware import gpu_profile
from runs.gpu_catalogue_seed import (
    GB200_PRICE_NOTE,
    GB200_UNPRICED_NOTE,
    GPU_CATALOGUE,
    GPU_DATASHEETS,
    PRICE_SOURCE,
)
from runs.models import GpuType

from .conftest import H100, make_model, signed_in

pytestmark = pytest.mark.django_db

UNKNOWN = "Imaginary X1"


def _unknown_gpu_type() -> GpuType:
    return GpuType.objects.create(
        id=UNKNOWN,
        display_name="AAA Imaginary X1",  # first by name, so only its memory puts it last
        price_source="test",
        price_as_of=datetime.date(2026, 11, 1),
    )


def test_it_knows_the_memory_and_bandwidth_of_every_seeded_gpu_type(alice):
    seeded = GpuType.objects.filter(id__in=[row[0] for row in GPU_CATALOGUE])
    assert seeded.count() == len(GPU_CATALOGUE)
    for gpu in seeded:
        # The simulator's profile, or the catalogue's own cited datasheet.
        facts = gpu.hardware or gpu.datasheet
        assert facts.marketing_gb and facts.bandwidth_tbps and facts.bf16_tflops, gpu.id


def test_no_fact_is_stated_both_by_the_simulator_and_the_catalogue():
    # When agents.hardware learns a fact (an FP8 peak, say), the datasheet's copy must go.
    for gpu_id, sheet in GPU_DATASHEETS.items():
        try:
            profile = gpu_profile(gpu_id)
        except ValueError:
            continue
        for name in ("fp8_tflops", "fp4_tflops", "bf16_tflops", "marketing_gb", "bandwidth_tbps"):
            if getattr(sheet, name) is not None:
                assert not hasattr(profile, name), f"{gpu_id}: {name} stated twice"


def test_the_newest_gpus_are_seeded_with_cited_facts_and_a_price(alice):
    client, org = alice.client(), alice.org.slug

    def api(gpu_id):
        return client.get(reverse("gpu-type-detail", kwargs={"org": org, "pk": gpu_id})).json()

    expected = {
        # id: (GB, GB/s, BF16, FP8, FP4 dense TFLOP/s, secure $/h)
        "NVIDIA B200": (180, 8000, 2250.0, 4500.0, 9000.0, "6.7900"),
        "NVIDIA B300 SXM6 AC": (288, 8000, 2250.0, 4500.0, 13125.0, "7.8900"),
        "NVIDIA GB200": (186, 8000, 2500.0, 5000.0, 10000.0, "10.5000"),
        "NVIDIA GB300": (279, 8000, 2500.0, 5000.0, 15000.0, None),
    }
    for gpu_id, figures in expected.items():
        row = api(gpu_id)
        keys = ("memory_gb", "memory_bandwidth_gbps", "bf16_tflops", "fp8_tflops")
        got = (*(row[k] for k in keys), row["fp4_tflops"], row["price_secure_usd_hr"])
        assert got == figures, gpu_id
        assert row["datasheet_source"], gpu_id
    # GB200 and GB300 are not Runpod's: GB200 carries another cloud's rate, said so; GB300
    # has none until an organization sets one.
    assert "CoreWeave" in api("NVIDIA GB200")["price_source"]
    assert "not offered by Runpod" in api("NVIDIA GB300")["price_source"]
    # Both are simulator profiles now: memory as CUDA sees it, and an NVL72 NVLink domain.
    assert (api("NVIDIA GB200")["memory_gib"], api("NVIDIA GB300")["memory_gib"]) == (
        185.03,
        277.55,
    )
    assert gpu_profile("GB300").nvlink_domain == 72


def test_it_answers_a_gpus_facts_from_the_hardware_module(alice):
    _unknown_gpu_type()
    client, org = alice.client(), alice.org.slug
    h100 = client.get(reverse("gpu-type-detail", kwargs={"org": org, "pk": H100})).json()
    assert (h100["memory_gib"], h100["memory_bandwidth_gbps"], h100["bf16_tflops"]) == (
        79.19,  # GiB as CUDA reports it, not the 80 of the product name
        3350,
        989.0,
    )
    assert "vram_gb" not in h100
    unknown = client.get(reverse("gpu-type-detail", kwargs={"org": org, "pk": UNKNOWN})).json()
    assert (unknown["memory_gib"], unknown["memory_bandwidth_gbps"], unknown["bf16_tflops"]) == (
        None,
        None,
        None,
    )
    assert unknown["display_name"] == "AAA Imaginary X1"


def test_it_orders_the_gpu_types_by_memory_with_unknown_ones_last(alice):
    _unknown_gpu_type()
    make_model(alice.org)
    expected = [
        "RTX 4090 24GB",
        "L40S 48GB",
        "A100 PCIe 80GB",  # 79.15 GiB, as the SXM board: by name
        "A100 SXM 80GB",
        "H100 SXM 80GB",  # 79.19 GiB
        "H200 141GB",
        "B200 180GB",
        "GB200 186GB",  # 185.03 GiB
        "B300 288GB",  # 267.69 GiB
        "GB300 279GB",  # 277.55 GiB
        # No simulator profile, so no memory as CUDA reports it: last.
        "AAA Imaginary X1",
    ]
    assert [gpu.display_name for gpu in GpuType.by_memory()] == expected
    page = signed_in(alice).get("/o/acme/models/").content.decode()
    assert sorted(expected, key=page.index) == expected  # the fit table's rows, in that order


GB200_PRICED = importlib.import_module("runs.migrations.0043_gb200_seeded_price").forwards


def test_the_migration_prices_an_unpriced_seeded_gb200_and_nothing_an_operator_set(alice):
    # A GB200 row as the seed wrote it before it had a price.
    seeded_before = f"{PRICE_SOURCE}; {GB200_UNPRICED_NOTE}"
    GpuType.objects.filter(id="NVIDIA GB200").update(
        price_secure_usd_hr=None, price_source=seeded_before
    )
    GB200_PRICED(apps, None)
    row = GpuType.objects.get(id="NVIDIA GB200")
    expected = next(entry[2] for entry in GPU_CATALOGUE if entry[0] == "NVIDIA GB200")
    assert expected is not None and row.price_secure_usd_hr == Decimal(expected)
    assert row.price_source == f"{PRICE_SOURCE}; {GB200_PRICE_NOTE}"
    # A row an operator re-sourced (still unpriced) is left as it is.
    GpuType.objects.filter(id="NVIDIA GB200").update(
        price_secure_usd_hr=None, price_source="our own contract"
    )
    GB200_PRICED(apps, None)
    row.refresh_from_db()
    assert (row.price_secure_usd_hr, row.price_source) == (None, "our own contract")
