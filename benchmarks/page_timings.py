"""Server time of every page that reads the organization's history — the run pages
(history, live run page and its JSON, compare) and the managers' pages (reports and their CSV
exports, promotions, the audit log) — with 1,000 runs and 20,000 audit events in one
organization. Target: p95 under 300 ms per page, and under 300 ms for the first request of
a report or audit page in a fresh process ("cold": the median of ``--cold`` processes, each
started anew for one request, as after a deploy or a restart).

The seeded organization looks like a real one after a year of sweeps: three models on five
GPU types (one priced by an organization override, one pod count of 2 and one of 4), measured
and simulated experiments, SLOs on TTFT and TPOT with levels that miss them, failed and
cancelled runs, pods billed at their own rate beside runs priced from the catalogue, budgets
(standing, monthly, per experiment), a ``run.start`` audit event per run (padded with
``run.view`` events up to ``--audit-events``) and promotions proposed, approved, rejected and
superseded. Its ended runs' level figures are kept (``runs.services.level_figures``), as the release
of each run's pod keeps them in production.

Runs in-process through the full Django stack (middleware, session authentication, access
layer, templates) against a throw-away test database created from DATABASE_URL
(PostgreSQL); no network hop and no browser rendering are included. A CSV export is timed
until its last byte. Pages are served with DEBUG off, as in production, and without Django's
test instrumentation: ``setup_test_environment()`` makes every template render keep a copy
of its context on the response, which holds a whole report in reference cycles until the
cycle collector runs — a cost only the test client pays.

    eval "$(.venv/bin/python tests/service_env.py)"
    .venv/bin/python benchmarks/page_timings.py --runs 1000 --repeats 50

``--keepdb`` keeps the seeded database for the next run (and reuses it); ``--dump DIR``
writes every page's body, to compare two versions of the code on the very same rows.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
os.environ.setdefault("DEBUG", "true")

import django

django.setup()


def cold_child(url: str, params: str, session: str) -> None:
    """One request in this fresh process, timed to its last byte: what the first visitor of
    a page waits for after a deploy or a restart. The process starts as the site's ASGI
    worker does before it listens (``benchsite.warmup.warm_up``: URLconf, views, templates),
    timed apart; then the request connects to the database and reads what it shows.
    Prints both times, in ms."""
    from django.conf import settings
    from django.test import Client

    from benchsite.warmup import warm_up

    settings.DEBUG = False
    warnings.filterwarnings("ignore", message="No directory at", module="django.core.handlers")
    started = warm_up() * 1000
    client = Client()
    client.cookies[settings.SESSION_COOKIE_NAME] = session
    start = time.perf_counter()
    response = client.get(url, json.loads(params))
    body = b"".join(response.streaming_content) if response.streaming else response.content
    done = time.perf_counter()
    assert response.status_code == 200, (url, response.status_code, body[:300])
    print(f"{(done - start) * 1000:.3f} {started:.3f}")


if __name__ == "__main__" and sys.argv[1:2] == ["--cold-child"]:
    cold_child(*sys.argv[2:5])
    sys.exit(0)

from django.conf import settings  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from agents.hardware import MODEL_PRESETS  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.audit import audit_chain_verify_full, audit_record  # noqa: E402
from runs.costs import run_cost_usd  # noqa: E402
from runs.models import (  # noqa: E402
    AgentMessageRecord,
    AuditChainCheckpoint,
    GpuType,
    Measurement,
    Membership,
    Organization,
    Run,
    Trial,
    User,
)
from runs.run_as_started import run_frozen_fields  # noqa: E402
from runs.selectors.ended_trial_figures import ended_trial_figures  # noqa: E402
from runs.selectors.estimates import experiment_estimate  # noqa: E402
from runs.services.budgets import budget_set  # noqa: E402
from runs.services.catalogue import gpu_price_set, model_spec_create  # noqa: E402
from runs.services.experiments import experiment_create  # noqa: E402
from runs.services.level_figures import trial_level_figures_record  # noqa: E402
from runs.services.promotions import (  # noqa: E402
    promotion_approve,
    promotion_propose,
    promotion_reject,
)
from runs.services.tenancy import membership_add, org_create  # noqa: E402

TARGET_MS = 300
CONCURRENCY = (1, 8, 64, 192)
GRID = {"max_num_seqs": [64, 128, 256]}
WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 1024, "output_len": 256},
    "concurrency": list(CONCURRENCY),
    "requests_per_level": 200,
}
SLOS = {"ttft_ms": 500, "tpot_ms": 40}
# Another team's tighter objectives: those experiments never compete in the others' choice.
TIGHT_SLOS = {"ttft_ms": 250, "tpot_ms": 25}
H100, A100, L40S, B200 = (
    "NVIDIA H100 80GB HBM3",
    "NVIDIA A100-SXM4-80GB",
    "NVIDIA L40S",
    "NVIDIA B200",
)
# name, model preset, GPU type, GPUs, engine, image tag, serve grid, SLOs, speed. Speed scales
# throughput and latency (a faster GPU, a smaller model), so every group has its own costs.
EXPERIMENTS = [
    ("llama-8b h100 v0.10.2", "llama-3.1-8b", H100, 1, "vllm", "v0.10.2", GRID, SLOS, 1.0),
    ("llama-8b h100 v0.11.0", "llama-3.1-8b", H100, 1, "vllm", "v0.11.0", GRID, SLOS, 1.1),
    ("llama-8b a100", "llama-3.1-8b", A100, 1, "vllm", "v0.11.0", GRID, SLOS, 0.6),
    ("llama-8b l40s", "llama-3.1-8b", L40S, 1, "vllm", "v0.11.0",
     {"max_num_seqs": [64, 128]}, SLOS, 0.35),
    ("qwen-7b h100", "qwen2.5-7b", H100, 1, "vllm", "v0.11.0", GRID, SLOS, 1.15),
    ("qwen-7b a100", "qwen2.5-7b", A100, 1, "vllm", "v0.11.0", GRID, SLOS, 0.65),
    ("llama-70b h100 tp2", "llama-3.1-70b", H100, 2, "vllm", "v0.11.0",
     {"max_num_seqs": [128, 256]}, SLOS, 0.3),
    ("llama-70b a100 tp4", "llama-3.1-70b", A100, 4, "vllm", "v0.11.0", {}, SLOS, 0.25),
    ("llama-8b h100 tight", "llama-3.1-8b", H100, 1, "vllm", "v0.11.0", GRID,
     TIGHT_SLOS, 1.1),
    ("llama-8b simulated", "llama-3.1-8b", H100, 1, "sim", "", GRID, SLOS, 1.3),
    ("llama-70b simulated b200", "llama-3.1-70b", B200, 2, "sim", "", {}, SLOS, 0.5),
]  # fmt: skip  # a table
# The model-choice page timed: the experiment most others share workload and SLOs with.
CHOICE_EXPERIMENT = "llama-8b h100 v0.11.0"
# The live page's run: a long one, with the progress notices of every level.
PROGRESS_MESSAGES = 1200
STATES = ("succeeded", "succeeded", "succeeded", "succeeded", "failed", "cancelled")
# A run every 9 hours: 1,000 runs span a year of months for the spend report.
RUN_SPACING = datetime.timedelta(hours=9)


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def level_result(
    concurrency: int, trial: int, run: int, *, speed: float, slos: dict, simulated: bool
) -> dict:
    """A result with every key the load generator reports (the rows are as big as real), and
    the SLO report of ``slos``: the heaviest levels miss them, more so on slow hardware."""
    jitter = 1 + (run % 7) / 100
    # Latency grows slower than throughput falls: a big model still meets the SLOs at low load.
    ttft = (40.0 + concurrency * (1 + trial * 0.1)) / speed**0.5 * jitter
    tpot = (9.0 + trial + concurrency / 16) / speed**0.3
    figures = {
        "completed": 200,
        # Now and then a level loses a request: it cannot count as meeting the SLOs.
        "failed": 1 if (run + trial) % 23 == 0 and concurrency == 64 else 0,
        "duration": 30.0,
        "total_input_tokens": 204_800,
        "total_output_tokens": 51_200,
        "request_throughput": 6.6,
        "request_goodput": 6.6,
        "output_throughput": round(350.0 * speed * concurrency**0.6 * jitter, 3),
        "total_token_throughput": 1750.0 * speed * concurrency**0.6,
        "max_output_tokens_per_s": 420.0 * speed * concurrency**0.6,
        "max_concurrent_requests": concurrency,
    }
    for metric, base in (("ttft", ttft), ("tpot", tpot), ("itl", tpot * 0.95), ("e2el", 3000.0)):
        for stat, factor in (
            ("mean", 1.1),
            ("median", 1.0),
            ("std", 0.2),
            ("p90", 1.6),
            ("p95", 1.8),
            ("p99", 2.2),
        ):
            figures[f"{stat}_{metric}_ms"] = round(base * factor, 4)
    figures["slo"] = {
        f"{metric}_ms": {
            "target": target,
            "p99": figures[f"p99_{metric}_ms"],
            "met": figures[f"p99_{metric}_ms"] <= target,
        }
        for metric in ("ttft", "tpot")
        if (target := slos.get(f"{metric}_ms")) is not None
    }
    if simulated:
        figures["simulated"] = {"speed": 1.0}
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


def pad_audit_log(org, actor, runs, total: int) -> None:
    """More events, up to ``total`` in all: what a busy year of tokens, budgets and
    promotions leaves in the chain (each appended by ``audit_record``, hash-chained)."""
    missing = total - org.audit_events.count()
    for start in range(0, max(missing, 0), 1000):
        with transaction.atomic():
            for n in range(start, min(start + 1000, missing)):
                run = runs[n % len(runs)]
                audit_record(
                    org=org,
                    actor=actor,
                    event="run.view",
                    target=run,
                    after={"n": n, "trigger": run.trigger},
                )


def seed(count: int):
    actor = Actor.system("benchmark")
    owner = User.objects.create_user("owner@bench.example", "bench-password-1")
    admin = User.objects.create_user("admin@bench.example", "bench-password-1")
    org = org_create(slug="bench", name="Bench", owner=owner, actor=actor)
    membership_add(org=org, user=admin, role="admin", actor=actor)
    models = {
        key: model_spec_create(org=org, actor=actor, **MODEL_PRESETS[key].registered)
        for key in {row[1] for row in EXPERIMENTS}
    }
    # The A100s are priced by the organization's contract, not the catalogue.
    gpu_price_set(
        org=org,
        gpu_type=GpuType.objects.get(id=A100),
        actor=actor,
        price_secure_usd_hr=Decimal("1.6500"),
        price_community_usd_hr=None,
        note="reserved contract",
    )
    experiments = []
    for name, model, gpu, count_gpus, engine, tag, grid, slos, speed in EXPERIMENTS:
        experiment = experiment_create(
            org=org,
            actor=actor,
            name=name,
            model=models[model],
            gpu_type=GpuType.objects.get(id=gpu),
            gpu_count=count_gpus,
            engine=engine,
            engine_image_tag=tag,
            serve_grid=grid,
            workload=WORKLOAD,
            slos=slos,
            budget_cap_usd=Decimal(50),
        )
        frozen = run_frozen_fields(
            experiment=experiment, estimate=experiment_estimate(experiment=experiment)
        )
        experiments.append((experiment, frozen, speed))
    budget_set(org=org, actor=actor, limit_usd=Decimal("400"))
    now = timezone.now()
    this_month = now.date().replace(day=1)
    budget_set(org=org, actor=actor, limit_usd=Decimal("250"), month=this_month)
    for experiment, _, _ in experiments[:4]:
        budget_set(org=org, actor=actor, limit_usd=Decimal("120"), experiment=experiment)

    # Bulk-inserted: the benchmark is about reading pages over a big history, not seeding.
    plan = []
    for i in range(count):
        experiment, frozen, speed = experiments[i % len(experiments)]
        simulated = experiment.simulated
        state = STATES[i % len(STATES)]
        seconds = Decimal(900 + (i % 11) * 60)
        # Half the pods report their billed rate; the others are priced from the catalogue
        # (or the organization's override) at report time. The simulator rents nothing.
        billed_rate = (
            None
            if simulated or i % 2
            else (experiment.gpu_type.price_secure_usd_hr * experiment.gpu_count).quantize(
                Decimal("0.0001")
            )
        )
        catalogue_rate = experiment.gpu_type.price_secure_usd_hr * experiment.gpu_count
        run = Run(
            organization=org,
            experiment=experiment,
            state=state,
            created_at=now - RUN_SPACING * i,
            started_by=owner,
            trigger=("ci", "ui", "api")[i % 3],
            **frozen,
            provider="local" if simulated else "runpod",
            pod_gpu_type="" if simulated else experiment.gpu_type_id,
            pod_cloud_type="" if simulated else "secure",
            price_usd_hr=billed_rate,
            cost_usd=(
                Decimal(0)
                if simulated
                else run_cost_usd(seconds=seconds, pod_usd_per_hr=billed_rate or catalogue_rate)
            ),
            billed_seconds=0.0 if simulated else float(seconds),
        )
        plan.append((run, experiment, speed))
    runs = Run.objects.bulk_create([run for run, _, _ in plan], batch_size=1000)
    trial_rows = []
    for n, (run, experiment, speed) in enumerate(plan):
        configs = [
            dict(zip(experiment.serve_grid, values, strict=True))
            for values in _product(experiment.serve_grid)
        ]
        if run.state == "cancelled":
            configs = configs[:1]  # stopped after its first trial
        for index, config in enumerate(configs):
            # The largest batch of a failed run ran out of memory at start-up.
            failed = run.state == "failed" and index == len(configs) - 1
            trial_rows.append(
                (
                    Trial(
                        run=run,
                        organization=org,
                        index=index,
                        serve_config=config,
                        command=["vllm", "serve", "m", *_flags(config)],
                        cold_start={
                            "engine_start": 0.0,
                            "weights_loaded": 21.0 + n % 5,
                            "health_ready": 35.5 + n % 5,
                            **({} if failed else {"first_token": 36.0 + n % 5}),
                        },
                        outcome="failed" if failed else "succeeded",
                        failure_class="oom_at_startup" if failed else "",
                        log_tail="torch.OutOfMemoryError: CUDA out of memory" if failed else "",
                        started_at=run.created_at,
                        finished_at=run.created_at,
                    ),
                    experiment,
                    speed,
                )
            )
    Trial.objects.bulk_create([t for t, _, _ in trial_rows], batch_size=1000)
    metrics = server_metrics()
    Measurement.objects.bulk_create(
        [
            Measurement(
                trial=trial,
                organization=org,
                concurrency=concurrency,
                result=level_result(
                    concurrency,
                    trial.index,
                    n,
                    speed=speed,
                    slos=experiment.slos,
                    simulated=experiment.engine == "sim",
                ),
                server_metrics=metrics,
            )
            for n, (trial, experiment, speed) in enumerate(trial_rows)
            if trial.outcome == "succeeded"
            for concurrency in CONCURRENCY
        ],
        batch_size=1000,
    )
    # The audit log of a year: one run.start per run (and run.cancel), oldest first.
    with transaction.atomic():
        for run, experiment, _ in reversed(plan):
            audit_record(
                org=org,
                actor=actor,
                event="run.start",
                target=run,
                after={"experiment": str(experiment.id), "reason": "", "trigger": run.trigger},
            )
            if run.state == "cancelled":
                audit_record(
                    org=org,
                    actor=actor,
                    event="run.cancel",
                    target=run,
                    before={"state": "benchmarking"},
                    after={"state": "cancelled"},
                )
    _promote(org, owner, admin, experiments)
    live = runs[0]
    Run.objects.filter(pk=live.pk).update(state="benchmarking", pod_started_at=now)
    AgentMessageRecord.objects.bulk_create(
        [
            AgentMessageRecord(
                run=live,
                organization=org,
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
    # What the release of each ended run's pod keeps for the reports.
    trial_level_figures_record()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            for table in (
                "runs_triallevelfigures",
                "runs_run",
                "runs_trial",
                "runs_measurement",
                "runs_agentmessagerecord",
                "runs_auditevent",
            ):
                cursor.execute(f"ANALYZE {table}")
    return org, owner, runs, models["llama-3.1-8b"]


def already_seeded():
    """What ``seed`` returned, read back from a kept database; None when it was not seeded."""
    org = Organization.objects.filter(slug="bench").first()
    if org is None:
        return None
    owner = User.objects.get(email="owner@bench.example")
    runs = list(Run.objects.filter(organization=org).order_by("-created_at"))
    model = org.models.get(name=MODEL_PRESETS["llama-3.1-8b"].name)
    return org, owner, runs, model


def _product(grid: dict) -> list[tuple]:
    combos: list[tuple] = [()]
    for values in grid.values():
        combos = [(*combo, value) for combo in combos for value in values]
    return combos


def _flags(config: dict) -> list[str]:
    return [part for name, value in config.items() for part in (f"--{name}", str(value))]


def _promote(org, owner, admin, experiments) -> None:
    """Promotions as a team makes them: recent measured trials proposed by the owner and
    decided by an admin — approved, the approval superseded by a later one, one rejected."""
    as_owner = (Membership.objects.get(organization=org, user=owner), Actor(user=owner, via="web"))
    as_admin = (Membership.objects.get(organization=org, user=admin), Actor(user=admin, via="web"))
    for experiment, _, _ in experiments[:6]:
        candidates = Trial.objects.filter(
            run__experiment=experiment, run__state="succeeded", outcome="succeeded"
        ).order_by("-run__created_at", "index")[:3]
        for place, trial in enumerate(candidates):
            membership, actor = as_owner
            promotion = promotion_propose(
                membership=membership, actor=actor, trial=trial, note="cheapest at SLOs"
            )
            membership, actor = as_admin
            if place == 2:
                promotion_reject(
                    membership=membership, actor=actor, promotion=promotion, comment="no headroom"
                )
            else:
                promotion_approve(
                    membership=membership, actor=actor, promotion=promotion, comment="ok"
                )


def timed(client: Client, url: str, params: dict, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        response = client.get(url, params)
        # An export streams: it is timed until its last byte.
        body = b"".join(response.streaming_content) if response.streaming else response.content
        samples.append((time.perf_counter() - start) * 1000)
        assert response.status_code == 200, (url, response.status_code, body[:300])
    return samples


def dump(client: Client, url: str, params: dict, path: Path) -> None:
    """The page's body into ``path``, for a byte-for-byte comparison across code changes."""
    response = client.get(url, params)
    body = b"".join(response.streaming_content) if response.streaming else response.content
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body)


def cold_first_request(url: str, params: dict, session: str) -> tuple[float, float]:
    """The first request of ``url`` in a fresh process (``cold_child``), in ms, and the
    process's start-up before it (which no visitor waits for)."""
    settings_dict = connection.settings_dict
    env = dict(os.environ)
    # The child reads the seeded test database: the parent's DATABASE_URL, renamed.
    base = os.environ["DATABASE_URL"].rsplit("/", 1)[0]
    env["DATABASE_URL"] = f"{base}/{settings_dict['NAME']}"
    out = subprocess.run(
        [sys.executable, __file__, "--cold-child", url, json.dumps(params), session],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    total, startup = out.stdout.strip().splitlines()[-1].split()
    return float(total), float(startup)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--only", default="", help="time only the pages whose name has this")
    parser.add_argument(
        "--keepdb",
        action="store_true",
        help="keep the seeded test database (and reuse it when it is there): compare pages "
        "across code changes on the very same rows",
    )
    parser.add_argument(
        "--audit-events",
        type=int,
        default=20_000,
        help="audit events in the organization (a run.start per run, the rest padding)",
    )
    parser.add_argument(
        "--cold",
        type=int,
        default=5,
        help="fresh processes per report and audit page whose first request is timed "
        "(median shown; 0: none)",
    )
    parser.add_argument(
        "--dump", default="", help="write every page's body into this folder (for a diff)"
    )
    args = parser.parse_args()

    # As in production (DEBUG only let the settings load without secrets): no query log and
    # no template debug information. WhiteNoise then looks for collected static files, which
    # no page timed here serves.
    settings.DEBUG = False
    warnings.filterwarnings("ignore", message="No directory at", module="django.core.handlers")
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=args.keepdb)
    try:
        seeded = args.keepdb and already_seeded()
        org, owner, runs, model = seeded or seed(args.runs)
        pad_audit_log(org, Actor.system("benchmark"), runs, args.audit_events)
        client = Client()
        client.force_login(owner)
        base = f"/o/{org.slug}/runs/"
        # Both of three trials (a grid of three, succeeded): runs[0] is the live one.
        live, older = runs[0], runs[12]
        choice = org.experiments.get(name=CHOICE_EXPERIMENT)
        promotion = org.promotions.order_by("proposed_at").first()
        reports = f"/o/{org.slug}/reports/"
        cases = [
            ("history, first page", base, {}),
            ("history, page 10", base, {"page": 10}),
            (
                "history, 4 filters",
                base,
                {
                    "model": str(model.id),
                    "gpu": H100,
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
                {"trials": [f"{r.id}:{i}" for r in runs[13:15] for i in (0, 1)]},
            ),
            ("reports index", reports, {}),
            ("report: cost per token", f"{reports}costs/", {}),
            ("  CSV: measured", f"{reports}costs/", {"csv": "measured"}),
            ("  CSV: simulated", f"{reports}costs/", {"csv": "simulated"}),
            ("report: model size", f"{reports}models/", {}),
            ("  CSV: measured", f"{reports}models/", {"csv": "measured"}),
            ("report: spend", f"{reports}spend/", {}),
            ("  CSV: months", f"{reports}spend/", {"csv": "months"}),
            ("  CSV: experiments", f"{reports}spend/", {"csv": "experiments"}),
            ("report: model choice", f"{reports}choice/{choice.id}/", {}),
            ("  CSV: runners-up", f"{reports}choice/{choice.id}/", {"csv": "runners-up"}),
            ("promotions", f"/o/{org.slug}/promotions/", {}),
            ("promotion detail", f"/o/{org.slug}/promotions/{promotion.id}/", {}),
            ("audit log", f"/o/{org.slug}/audit/", {}),
            ("audit log, filtered", f"/o/{org.slug}/audit/", {"event": "run.cancel"}),
            ("  CSV: whole audit log", f"/o/{org.slug}/audit/", {"format": "csv"}),
        ]
        total = Run.objects.filter(organization=org).count()
        trials = Trial.objects.filter(run__organization=org).count()
        levels = Measurement.objects.filter(trial__run__organization=org).count()
        events = org.audit_events.count()
        print(
            f"database: {connection.vendor}; in the organization: {total} runs, {trials} trials, "
            f"{levels} measurements, {len(EXPERIMENTS)} experiments, {events} audit events; "
            f"{args.repeats} timed requests per page after 5 warm-ups"
        )
        print(f"load average before timing: {load_average()}")
        # The periodic full verification of the audit chain (manage.py audit_verify), which
        # leaves the checkpoint the log page verifies from; and the page's very first view,
        # with no checkpoint yet, which walks the whole chain once.
        start = time.perf_counter()
        assert audit_chain_verify_full(org=org) is None
        full_ms = (time.perf_counter() - start) * 1000
        AuditChainCheckpoint.objects.filter(organization=org).delete()
        no_checkpoint_ms, *_ = timed(client, f"/o/{org.slug}/audit/", {}, 1)
        print(
            f"audit chain of {events} events: full verification {full_ms:.1f} ms; "
            f"the log page's first view ever (no checkpoint) {no_checkpoint_ms:.1f} ms"
        )
        # "first": the page's first request in this process, before its warm-ups, with no
        # trial priced in memory (runs.selectors.ended_trial_figures), as after a price change
        # (templates of the pages timed before it already compiled). "cold": the median of
        # --cold fresh processes' first request (cold_child), report and audit pages only,
        # after the worker's start-up ("startup": loading views and templates before it
        # listens, which no visitor waits for).
        print(
            f"{'page':30} {'cold ms':>8} {'startup':>8} {'first ms':>9} {'median ms':>10}"
            f" {'p95 ms':>8}"
            f" {'max ms':>8}  target: cold and p95 < {TARGET_MS} ms"
        )
        worst, dumped = 0.0, []
        session = client.cookies[settings.SESSION_COOKIE_NAME].value
        for name, url, params in cases:
            if args.only not in name:
                continue
            cold = startup = None
            if args.cold and ("/reports/" in url or "/audit/" in url):
                starts = [cold_first_request(url, params, session) for _ in range(args.cold)]
                cold = statistics.median(total for total, _ in starts)
                startup = statistics.median(warming for _, warming in starts)
                worst = max(worst, cold)
            ended_trial_figures.clear()  # as after a price change: nothing priced in memory
            first, *_ = timed(client, url, params, 5)
            if args.dump:
                dump(client, url, params, Path(args.dump) / f"{len(dumped):02d} {name.strip()}")
                dumped.append(name)
            samples = timed(client, url, params, args.repeats)
            p95 = percentile(samples, 0.95)
            worst = max(worst, p95)
            slow = p95 >= TARGET_MS or (cold or 0) >= TARGET_MS
            print(
                f"{name:30} {'-' if cold is None else f'{cold:.1f}':>8}"
                f" {'-' if cold is None else f'{startup:.1f}':>8} {first:9.1f}"
                f" {statistics.median(samples):10.1f} {p95:8.1f} {max(samples):8.1f}"
                f"  {'SLOW' if slow else 'ok'}"
            )
        print(f"load average after timing: {load_average()}")
        print(
            f"worst cold or p95: {worst:.1f} ms "
            f"({'within' if worst < TARGET_MS else 'over'} the target)"
        )
    finally:
        if args.keepdb:
            connection.close()
            connection.settings_dict["NAME"] = old_name
        else:
            connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
