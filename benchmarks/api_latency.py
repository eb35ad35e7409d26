"""p50/p99 latency of the experiment list and create endpoints with 10,000 experiments in one
organization, and the CPU time of refusing a huge (just under 1 MB) serve grid.

Runs in-process through the full Django + DRF stack (middleware, token authentication,
access layer, serializers, validation, audit) against a throw-away test database created
from DATABASE_URL (PostgreSQL in `make bench-api`); no network hop is included.

    make bench-api            # or: python benchmarks/api_latency.py --experiments 10000
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import resource
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
os.environ.setdefault("DEBUG", "true")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from agents.hardware import MODEL_PRESETS  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import Experiment, GpuType, User  # noqa: E402
from runs.services.catalogue import model_spec_create  # noqa: E402
from runs.services.experiments import experiment_create  # noqa: E402
from runs.services.tenancy import org_create, token_create  # noqa: E402

WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 1024, "output_len": 256},
    "concurrency": [1, 8, 64, 192],
    "requests_per_level": 200,
}


# Bodies just under the 1 MB limit that the create endpoint must refuse cheaply and briefly
# (before the fix, the first took 5 s and answered 49 MB for a 5.5 MB body).
HUGE_GRIDS = {
    "one long axis": {"max_num_seqs": list(range(1, 130_000))},
    "one long axis of bad values": {"max_num_seqs": [10**6 + i for i in range(100_000)]},
    "40,000 unknown flags": {f"flag_{i}": [1] for i in range(40_000)},
}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timed(call, repeats: int, first_index: int = 0) -> list[float]:
    samples = []
    for index in range(first_index, first_index + repeats):
        start = time.perf_counter()
        response = call(index)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code in (200, 201), response.content[:500]
    return samples


def seed(count: int):
    actor = Actor.system("benchmark")
    owner = User.objects.create_user("owner@bench.example")
    org = org_create(slug="bench", name="Bench", owner=owner, actor=actor)
    model = model_spec_create(org=org, actor=actor, **MODEL_PRESETS["llama-3.1-8b"].registered)
    gpu = GpuType.objects.get(id="NVIDIA H100 80GB HBM3")
    template = experiment_create(
        org=org,
        actor=actor,
        name="template",
        model=model,
        gpu_type=gpu,
        engine="vllm",
        engine_image_tag="v0.11.0",
        serve_grid={"max_num_seqs": [64, 128, 256]},
        workload=WORKLOAD,
        slos={"ttft_ms": 500},
        budget_cap_usd=Decimal(50),
    )
    # The 10,000 rows are bulk-inserted (a copy of a validated experiment): the benchmark
    # is about reading and writing with a big table, not about seeding it.
    fields = {
        f.attname: getattr(template, f.attname)
        for f in Experiment._meta.concrete_fields
        if f.attname not in {"id", "name", "created_at", "updated_at"}
    }
    start = template.created_at - datetime.timedelta(days=365)
    Experiment.objects.bulk_create(
        [
            Experiment(
                **fields,
                name=f"experiment {i:05d}",
                created_at=start + datetime.timedelta(minutes=i),
                updated_at=start + datetime.timedelta(minutes=i),
            )
            for i in range(count - 1)
        ],
        batch_size=1000,
    )
    if connection.vendor == "postgresql":
        # Autovacuum would analyse a table this size within a minute in production; a
        # benchmark that runs at once must not measure plans made from empty statistics.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE runs_experiment")
    token = token_create(org=org, user=owner, name="bench", actor=actor).raw
    return org, model, token


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()

    setup_test_environment()
    logging.getLogger("django.request").setLevel(logging.ERROR)  # each refusal warns otherwise
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        org, model, token = seed(args.experiments)
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        base = f"/api/v1/orgs/{org.slug}/experiments/"
        gpu = "NVIDIA H100 80GB HBM3"
        cases = {
            "list (first page, 50)": lambda i: client.get(base),
            "list filtered by model": lambda i: client.get(base, {"model": str(model.id)}),
            "list filtered by name": lambda i: client.get(base, {"name": f"{i % 100:03d}"}),
            "create": lambda i: client.post(
                base,
                {
                    "name": f"created {i}",
                    "model": str(model.id),
                    "gpu_type": gpu,
                    "engine_image_tag": "v0.11.0",
                    "workload": WORKLOAD,
                    "serve_grid": {
                        "max_num_seqs": [64, 128],
                        "max_num_batched_tokens": [2048, 8192],
                    },
                    "slos": {"ttft_ms": 500},
                    "budget_cap_usd": "40.00",
                },
                format="json",
            ),
        }
        total = Experiment.objects.filter(organization=org).count()
        print(f"database: {connection.vendor}, experiments in the organization: {total}")
        print(f"{'endpoint':28} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8}")
        for name, call in cases.items():
            timed(call, 20)  # warm caches and connections; not counted
            samples = timed(call, args.repeats, first_index=20)
            print(
                f"{name:28} {len(samples):5d} {percentile(samples, 0.5):8.2f} "
                f"{percentile(samples, 0.99):8.2f} {statistics.fmean(samples):8.2f}"
            )
        print(f"\n{'refused serve grid':28} {'bytes':>7} {'status':>6} {'answer':>7} {'cpu ms':>8}")
        for name, grid in HUGE_GRIDS.items():
            body = json.dumps({"name": "huge", "model": str(model.id), "serve_grid": grid})
            costs = []
            for _ in range(5):
                started = cpu_seconds()
                response = client.post(base, body, content_type="application/json")
                costs.append((cpu_seconds() - started) * 1000)
            print(
                f"{name:28} {len(body):7d} {response.status_code:6d} "
                f"{len(response.content):7d} {statistics.median(costs):8.1f}"
            )
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
