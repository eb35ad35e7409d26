"""The GPU catalogue stores names and prices only: a GPU's physical facts are
agents.hardware's, read through GpuType.hardware by the API and the pages (issue 15)."""

from __future__ import annotations

import datetime

import pytest
from django.urls import reverse

from agents.hardware import gpu_profile
from runs.gpu_catalogue_seed import GPU_CATALOGUE
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


def test_it_knows_the_hardware_of_every_seeded_gpu_type(alice):
    seeded = GpuType.objects.filter(id__in=[row[0] for row in GPU_CATALOGUE])
    assert seeded.count() == len(GPU_CATALOGUE)
    assert all(gpu.hardware == gpu_profile(gpu.id) for gpu in seeded)


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
        "AAA Imaginary X1",
    ]
    assert [gpu.display_name for gpu in GpuType.by_memory()] == expected
    page = signed_in(alice).get("/o/acme/models/").content.decode()
    assert sorted(expected, key=page.index) == expected  # the fit table's rows, in that order
