"""How long one ``runs_reconcile()`` pass takes at scale, with its SQL queries and provider
calls: 1,000 active runs over 10 organizations (each with its own Runpod key) and 1,000 pods
in the fake Runpod API, spoken to by the real ``runpod`` SDK.

Every pass does the same work: it brings the cost of 950 benchmarking runs up to date (each
owns a pod), re-enqueues 50 queued runs whose provisioning was lost (none own a pod), and
terminates 50 orphan pods (``bench-*`` pods no run owns; put back between passes). 10,000
ended runs sit in the table as history. PostgreSQL from DATABASE_URL, in a throw-away
database of its own (migrated, dropped afterwards).

    eval "$(.venv/bin/python tests/service_env.py)" && .venv/bin/python benchmarks/reconcile_time.py

It prints each pass's wall time, SQL statements and calls to Runpod (the first pass, a fresh
worker's, apart), then the median, minimum and maximum. ``--latency 0.05`` makes every fake
Runpod answer 50 ms late (a real API's round trip); ``--profile`` profiles one more pass.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import logging
import os
import pstats
import statistics
import sys
import tempfile
import threading
import time
import uuid
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
os.environ.setdefault("DEBUG", "true")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.db.models import F  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

from agents.hardware import MODEL_PRESETS  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import GpuType, Run, User  # noqa: E402
from runs.models.runs import RunState  # noqa: E402
from runs.providers.base import pod_name  # noqa: E402
from runs.run_as_started import run_frozen_fields  # noqa: E402
from runs.selectors.estimates import experiment_estimate  # noqa: E402
from runs.services.catalogue import model_spec_create  # noqa: E402
from runs.services.credentials import provider_key_set  # noqa: E402
from runs.services.experiments import experiment_create  # noqa: E402
from runs.services.reconcile import runs_reconcile  # noqa: E402
from runs.services.tenancy import org_create  # noqa: E402
from tests.fakes.runpod_api import FakeRunpodApi  # noqa: E402

ACTOR = Actor.system("benchmark")
H100 = "NVIDIA H100 80GB HBM3"


def key_of(index: int) -> str:
    return f"rpa_bench_org{index:02d}_0123456789abcdef"


def seed(fake: FakeRunpodApi, *, orgs: int, running: int, queued: int, history: int) -> dict:
    """Organizations with keys, runs and pods; returns the orphan pod names per key."""
    now = timezone.now()
    orphans: dict[str, list[str]] = {}
    for index in range(orgs):
        owner = User.objects.create_user(f"owner{index}@bench.example", "bench-password")
        org = org_create(slug=f"org{index}", name=f"Org {index}", owner=owner, actor=ACTOR)
        key = key_of(index)
        fake.add_account(key)
        provider_key_set(actor=ACTOR, org=org, provider="runpod", api_key=key)
        model = model_spec_create(org=org, actor=ACTOR, **MODEL_PRESETS["llama-3.1-8b"].registered)
        experiment = experiment_create(
            org=org,
            actor=ACTOR,
            name="reconcile",
            model=model,
            gpu_type=GpuType.objects.get(id=H100),
            engine="vllm",
            engine_image_tag="v0.11.0",
            serve_grid={"max_num_seqs": [64, 128, 256], "max_num_batched_tokens": [2048, 8192]},
            workload={
                "dataset": {"kind": "random", "input_len": 512, "output_len": 128},
                "concurrency": [1, 8, 64],
                "requests_per_level": 100,
            },
            slos={"ttft_ms": 500, "tpot_ms": 50},
            budget_cap_usd=Decimal(500),
        )
        frozen = run_frozen_fields(
            experiment=experiment, estimate=experiment_estimate(experiment=experiment)
        )
        common = {"organization": org, "experiment": experiment, **frozen}
        runs = []
        for _ in range(running // orgs):
            run_id = uuid.uuid4()
            pod = fake.add_pod(key, pod_name(run_id))
            runs.append(
                Run(
                    id=run_id,
                    state=RunState.BENCHMARKING,
                    provider="runpod",
                    pod_id=pod.id,
                    pod_gpu_type=H100,
                    pod_cloud_type="secure",
                    price_usd_hr=Decimal("3.99"),
                    pod_started_at=now - datetime.timedelta(minutes=20),
                    last_heartbeat_at=now,
                    created_at=now - datetime.timedelta(minutes=21),
                    **common,
                )
            )
        runs += [
            Run(created_at=now - datetime.timedelta(minutes=5), **common)
            for _ in range(queued // orgs)
        ]
        runs += [
            Run(
                state=RunState.SUCCEEDED,
                provider="runpod",
                pod_id=f"gone{i}",
                price_usd_hr=Decimal("3.99"),
                pod_started_at=now - datetime.timedelta(days=3, hours=1),
                pod_terminated_at=now - datetime.timedelta(days=3),
                cost_usd=Decimal("3.99"),
                created_at=now - datetime.timedelta(days=3, hours=1),
                finished_at=now - datetime.timedelta(days=3),
                **common,
            )
            for i in range(history // orgs)
        ]
        Run.objects.bulk_create(runs, batch_size=1000)
        orphans[key] = [pod_name(uuid.uuid4()) for _ in range(max(0, 1000 - running) // orgs)]
    return orphans


def next_pass_ready(fake: FakeRunpodApi, orphans: dict[str, list[str]]) -> None:
    """The same work for every pass: the orphans are back, every running pod is a second
    older (so every cost changes) and every agent was heard from just now."""
    Run.objects.filter(state=RunState.BENCHMARKING).update(
        pod_started_at=F("pod_started_at") - datetime.timedelta(seconds=1),
        last_heartbeat_at=timezone.now(),
    )
    for key, names in orphans.items():
        present = {pod.name for pod in fake.pods(key)}
        for name in names:
            if name not in present:
                fake.add_pod(key, name)


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # quiet
        pass


@contextlib.contextmanager
def site_answering_its_probe():
    """A site at BENCHSITE_PUBLIC_URL that answers reconcile's ingest probe, so every pass
    includes the probe's round trip as a healthy installation's does."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Healthy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.BENCHSITE_PUBLIC_URL = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


class QueryCounter:
    """Counts the SQL statements the default connection executes (an execute wrapper)."""

    def __init__(self):
        self.count = 0

    def __call__(self, execute, sql, params, many, context):
        self.count += 1
        return execute(sql, params, many, context)


def one_pass(fake: FakeRunpodApi) -> tuple[float, int, int, object]:
    counter = QueryCounter()
    calls_before = len(fake.requests)
    enqueued: list[tuple[str, ...]] = []  # counted, never sent: no broker is needed here
    with (
        connection.execute_wrapper(counter),
        mock.patch("runs.services.reconcile.enqueue_after_commit", lambda *t: enqueued.append(t)),
    ):
        start = time.perf_counter()
        report = runs_reconcile(reprovision=True)
        elapsed = time.perf_counter() - start
    return elapsed, counter.count, len(fake.requests) - calls_before, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orgs", type=int, default=10)
    parser.add_argument("--running", type=int, default=950, help="benchmarking runs with a pod")
    parser.add_argument("--queued", type=int, default=50, help="queued runs, task lost")
    parser.add_argument("--history", type=int, default=10_000, help="ended runs")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per Runpod answer")
    parser.add_argument("--profile", action="store_true", help="profile one more pass")
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    if connection.vendor != "postgresql":
        sys.exit("DATABASE_URL must point at PostgreSQL (see tests/service_env.py)")
    connection.settings_dict["TEST"]["NAME"] = f"{old_name}_reconcile_bench"
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    fake = FakeRunpodApi(api_keys=(), latency=args.latency)
    try:
        with fake, site_answering_its_probe(), tempfile.TemporaryDirectory() as pods_dir:
            os.environ["RUNPOD_API_BASE_URL"] = fake.url
            settings.BENCHSITE_LOCAL_PODS_DIR = pods_dir  # no local pods
            orphans = seed(
                fake,
                orgs=args.orgs,
                running=args.running,
                queued=args.queued,
                history=args.history,
            )
            next_pass_ready(fake, orphans)
            logging.getLogger("runs").setLevel(logging.ERROR)  # one warning per orphan
            logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per probe
            active = Run.objects.exclude(state__in=["succeeded"]).count()
            print(
                f"database: {connection.vendor}; {args.orgs} organizations, {active} active runs "
                f"({args.running} benchmarking with a pod, {args.queued} queued), "
                f"{len(fake.all_pods())} pods ({sum(map(len, orphans.values()))} orphans), "
                f"{args.history} ended runs; Runpod latency {args.latency * 1000:.0f} ms"
            )
            print(f"{'pass':>4} {'seconds':>8} {'queries':>8} {'provider calls':>15}")
            times = []
            # Pass 0 is the worker's first after start-up (connections, caches): not counted.
            for number in range(args.repeats + 1):
                next_pass_ready(fake, orphans)
                elapsed, queries, calls, report = one_pass(fake)
                expected = (len(report.orphans_terminated), len(report.reprovisioned))
                assert expected == (sum(map(len, orphans.values())), args.queued), vars(report)
                assert not (report.failed or report.errors or report.over_budget), vars(report)
                times += [elapsed] if number else []
                note = "  (first pass: not counted)" if not number else ""
                print(f"{number:4d} {elapsed:8.3f} {queries:8d} {calls:15d}{note}")
            print(
                f"median {statistics.median(times):.3f} s, min {min(times):.3f} s, "
                f"max {max(times):.3f} s over {args.repeats} passes"
            )
            if args.profile:
                next_pass_ready(fake, orphans)
                profiler = cProfile.Profile()
                profiler.enable()
                one_pass(fake)
                profiler.disable()
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
    finally:
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
