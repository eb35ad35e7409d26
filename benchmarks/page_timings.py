"""Server time of the run pages (history, live run page and its JSON, compare) with 1,000 runs
in one organization, each with its trials and measurements. Target: under 300 ms.

Runs in-process through the full Django stack (middleware, session authentication, access
layer, templates) against a throw-away test database created from DATABASE_URL
(PostgreSQL); no network hop and no browser rendering are included.

    eval "$(.venv/bin/python tests/service_env.py)"
    .venv/bin/python benchmarks/page_timings.py --runs 1000 --repeats 50
"""

from __future__ import annotations

import argparse
import datetime
import os
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
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from runs.actors import Actor  # noqa: E402
from runs.model_presets import MODEL_PRESETS  # noqa: E402
from runs.models import (  # noqa: E402
    AgentMessageRecord,
    GpuType,
    Measurement,
    Run,
    Trial,
    User,
)
from runs.services.catalogue import model_spec_create  # noqa: E402
from runs.services.experiments import experiment_create  # noqa: E402
from runs.services.tenancy import org_create  # noqa: E402

TARGET_MS = 300
CONCURRENCY = (1, 8, 64, 192)
GRID = {"max_num_seqs": [64, 128, 256]}
WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 1024, "output_len": 256},
    "concurrency": list(CONCURRENCY),
    "requests_per_level": 200,
}
# The live page's run: a long one, with the progress notices of every level.
PROGRESS_MESSAGES = 1200
STATES = ("succeeded", "succeeded", "succeeded", "failed", "cancelled")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def level_result(concurrency: int, trial: int, run: int) -> dict:
    """A result with every key the load generator reports (the rows are as big as real)."""
    ttft = 40.0 + concurrency * (1 + trial * 0.1) + run % 7
    figures = {
        "completed": 200,
        "failed": 0,
        "duration": 30.0,
        "total_input_tokens": 204_800,
        "total_output_tokens": 51_200,
        "request_throughput": 6.6,
        "request_goodput": 6.6,
        "output_throughput": 1700.0 * concurrency**0.6,
        "total_token_throughput": 8500.0 * concurrency**0.6,
        "max_output_tokens_per_s": 2000.0 * concurrency**0.6,
        "max_concurrent_requests": concurrency,
    }
    for metric, base in (
        ("ttft", ttft),
        ("tpot", 9.0 + trial),
        ("itl", 8.5 + trial),
        ("e2el", 3000.0),
    ):
        for stat, factor in (
            ("mean", 1.1),
            ("median", 1.0),
            ("std", 0.2),
            ("p90", 1.6),
            ("p95", 1.8),
            ("p99", 2.2),
        ):
            figures[f"{stat}_{metric}_ms"] = base * factor
    figures["slo"] = {"ttft_ms": {"target": 500, "p99": ttft * 2.2, "met": ttft * 2.2 <= 500}}
    return figures


def server_metrics() -> dict:
    series = [
        {
            "t": float(t),
            "num_requests_running": 8.0,
            "num_requests_waiting": 2.0,
            "kv_cache_usage_perc": 0.4,
        }
        for t in range(30)
    ]
    return {
        "kv_cache_usage_perc": {"max": 0.6, "mean": 0.4},
        "num_requests_waiting": {"max": 5, "mean": 2},
        "num_requests_running": {"max": 64, "mean": 40},
        "num_preemptions": 0,
        "series": series,
    }


def seed(count: int):
    actor = Actor.system("benchmark")
    owner = User.objects.create_user("owner@bench.example", "bench-password-1")
    org = org_create(slug="bench", name="Bench", owner=owner, actor=actor)
    model = model_spec_create(org=org, actor=actor, **MODEL_PRESETS["llama-3.1-8b-instruct"])
    experiments = [
        experiment_create(
            org=org,
            actor=actor,
            name=f"sweep {tag} on {gpu}",
            model=model,
            gpu_type=GpuType.objects.get(id=gpu),
            engine="vllm",
            engine_image_tag=tag,
            serve_grid=GRID,
            workload=WORKLOAD,
            slos={"ttft_ms": 500},
            budget_cap_usd=Decimal(50),
        )
        for tag, gpu in (
            ("v0.10.2", "NVIDIA H100 80GB HBM3"),
            ("v0.11.0", "NVIDIA H100 80GB HBM3"),
            ("v0.11.0", "NVIDIA A100-SXM4-80GB"),
        )
    ]
    now = timezone.now()
    # Bulk-inserted: the benchmark is about reading pages over a big history, not seeding.
    runs = Run.objects.bulk_create(
        [
            Run(
                organization=org,
                experiment=experiments[i % len(experiments)],
                state=STATES[i % len(STATES)],
                created_at=now - datetime.timedelta(hours=i),
                started_by=owner,
                trigger="ci",
                price_usd_hr=Decimal("3.99"),
                cost_usd=Decimal("1.2345"),
                billed_seconds=1113.0,
            )
            for i in range(count)
        ],
        batch_size=1000,
    )
    configs = [{"max_num_seqs": value} for value in GRID["max_num_seqs"]]
    trials = Trial.objects.bulk_create(
        [
            Trial(
                run=run,
                index=index,
                serve_config=config,
                command=["vllm", "serve", "m", "--max-num-seqs", str(config["max_num_seqs"])],
                cold_start={"weights_loaded": 21.0, "health_ready": 35.5, "first_token": 36.0},
                outcome="succeeded",
                started_at=run.created_at,
                finished_at=run.created_at,
            )
            for run in runs
            for index, config in enumerate(configs)
        ],
        batch_size=1000,
    )
    metrics = server_metrics()
    Measurement.objects.bulk_create(
        [
            Measurement(
                trial=trial,
                concurrency=concurrency,
                result=level_result(concurrency, trial.index, n),
                server_metrics=metrics,
            )
            for n, trial in enumerate(trials)
            for concurrency in CONCURRENCY
        ],
        batch_size=1000,
    )
    live = runs[0]
    Run.objects.filter(pk=live.pk).update(state="benchmarking", pod_started_at=now)
    AgentMessageRecord.objects.bulk_create(
        [
            AgentMessageRecord(
                run=live,
                seq=seq,
                type="level_progress",
                payload={
                    "type": "level_progress",
                    "trial": seq % 3,
                    "level": {"concurrency": 64},
                    "requests_done": seq % 200,
                    "requests_total": 200,
                    "kv_cache_usage": 0.4,
                    "num_requests_waiting": seq % 9,
                    "sent_at": now.timestamp() + seq / 2,
                },
            )
            for seq in range(PROGRESS_MESSAGES)
        ],
        batch_size=1000,
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for table in ("runs_run", "runs_trial", "runs_measurement", "runs_agentmessagerecord"):
                cursor.execute(f"ANALYZE {table}")
    return org, owner, runs, model


def timed(client: Client, url: str, params: dict, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        response = client.get(url, params)
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()

    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        org, owner, runs, model = seed(args.runs)
        client = Client()
        client.force_login(owner)
        base = f"/o/{org.slug}/runs/"
        live, older = runs[0], runs[5]
        cases = [
            ("history, first page", base, {}),
            ("history, page 10", base, {"page": 10}),
            (
                "history, 4 filters",
                base,
                {
                    "model": str(model.id),
                    "gpu": "NVIDIA H100 80GB HBM3",
                    "engine": "v0.11.0",
                    "state": "succeeded",
                },
            ),
            (
                "history, date range",
                base,
                {"created_from": "2000-01-01", "created_to": "2100-01-01"},
            ),
            ("run page (1,200 progress)", f"{base}{live.id}/", {}),
            ("run live.json", f"{base}{live.id}/live.json", {}),
            ("run page (finished run)", f"{base}{older.id}/", {}),
            (
                "compare 2 runs (6 trials)",
                f"{base}compare/",
                {"runs": [str(live.id), str(older.id)]},
            ),
            (
                "compare 4 trials",
                f"{base}compare/",
                {"trials": [f"{r.id}:{i}" for r in runs[10:12] for i in (0, 1)]},
            ),
        ]
        total = Run.objects.filter(organization=org).count()
        levels = Measurement.objects.filter(trial__run__organization=org).count()
        print(
            f"database: {connection.vendor}; runs in the organization: {total}, "
            f"measurements: {levels}; {args.repeats} timed requests per page after 5 warm-ups"
        )
        print(f"{'page':30} {'median ms':>10} {'p95 ms':>8} {'max ms':>8}  target < {TARGET_MS} ms")
        worst = 0.0
        for name, url, params in cases:
            timed(client, url, params, 5)
            samples = timed(client, url, params, args.repeats)
            p95 = percentile(samples, 0.95)
            worst = max(worst, p95)
            print(
                f"{name:30} {statistics.median(samples):10.1f} {p95:8.1f} {max(samples):8.1f}"
                f"  {'ok' if p95 < TARGET_MS else 'SLOW'}"
            )
        print(f"worst p95: {worst:.1f} ms ({'within' if worst < TARGET_MS else 'over'} the target)")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
