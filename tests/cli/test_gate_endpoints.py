"""The CLI gate over runs of an existing endpoint (issue 20): the same promotion rules and
regression gate as any run — one trial, the endpoint as it is, compared level by level."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.utils import timezone

from runs.models import GpuType, Measurement, Run, Trial
from runs.services.endpoints import endpoint_create
from runs.services.experiments import experiment_create
from tests.agents.fake_openai_server import FakeServer
from tests.site.conftest import H100, SYSTEM, frozen, make_model
from tests.site.live_server import daphne_server

from .conftest import benchsite

pytestmark = pytest.mark.slow

KEY = "sk-gate-endpoint-0042"


def endpoint_experiment(org, base_url: str):
    endpoint = endpoint_create(
        org=org,
        actor=SYSTEM,
        name="prod",
        base_url=base_url,
        served_model_name="fake",
        api_key=KEY,
        price_usd_per_hour=Decimal("4"),
    )
    return experiment_create(
        org=org,
        actor=SYSTEM,
        name="prod as it is",
        model=make_model(org),
        gpu_type=GpuType.objects.get(id=H100),
        gpu_count=1,
        engine="endpoint",
        endpoint=endpoint,
        workload={
            "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
            "concurrency": [1, 4],
            "requests_per_level": 10,
        },
        slos={"ttft_ms": 500},
        budget_cap_usd=Decimal(5),
    )


def seed_run(experiment, ttfts: dict[int, float]) -> Run:
    """A succeeded run of the endpoint's one trial: p99 TTFT per concurrency."""
    now = timezone.now()
    run = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        **frozen(experiment),
        state="succeeded",
        provider="local",
        price_usd_hr=Decimal(4),
        started_at=now,
        finished_at=now,
    )
    trial = Trial.objects.create(
        organization_id=run.organization_id,
        run=run,
        index=0,
        serve_config={},
        outcome="succeeded",
        started_at=now,
        finished_at=now,
    )
    for concurrency, ttft in ttfts.items():
        Measurement.objects.create(
            organization_id=trial.organization_id,
            trial=trial,
            concurrency=concurrency,
            result={"p99_ttft_ms": ttft, "output_throughput": 500.0, "completed": 10, "failed": 0},
        )
    return run


@pytest.mark.django_db(transaction=True)
def test_the_gate_fails_an_endpoints_run_that_regressed_and_passes_one_that_held(
    alice, settings, tmp_path
):
    settings.BENCHSITE_ENDPOINT_HOSTS = ["127.0.0.1"]
    settings.BENCHSITE_OUTBOUND_PRIVATE_HOSTS = ["127.0.0.1"]
    with FakeServer(api_key=KEY) as server:
        experiment = endpoint_experiment(alice.org, server.base_url)
    base = seed_run(experiment, {1: 100.0, 4: 200.0})
    held = seed_run(experiment, {1: 101.0, 4: 202.0})
    regressed = seed_run(experiment, {1: 100.0, 4: 300.0})
    with daphne_server() as address:
        gate = ("--max-regression", "p99_ttft_ms=10%")
        passed = benchsite(
            "runs", "compare", str(held.id), "--baseline", str(base.id), *gate,
            url=f"http://{address}", token=alice.token,
        )  # fmt: skip  # flag, value
        failed = benchsite(
            "runs", "compare", str(regressed.id), "--baseline", str(base.id), *gate,
            "--json", str(tmp_path / "gate.json"), url=f"http://{address}", token=alice.token,
        )  # fmt: skip  # flag, value
    assert passed.code == 0, passed.text
    assert failed.code == 1, failed.text
    assert "regression: p99_ttft_ms" in failed.err and "concurrency=4" in failed.err
    rows = json.loads((tmp_path / "gate.json").read_text())["gate"]["rows"]
    assert [row["verdict"] for row in rows].count("regression") == 1, rows
    assert KEY not in passed.text + failed.text
