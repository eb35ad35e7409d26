"""How many agent messages per second the ingest socket stores into the database, and the
delay from a measurement leaving an agent to a browser socket receiving its notice (a bare
socket client, then the agent's real outbox with its fsync'd spool).

A real Daphne server (own process) on a throw-away test database from DATABASE_URL, the
channel layer from REDIS_URL; agents are `websockets` clients that pipeline their messages
(as the agent's spool does) and count acknowledgements. Every message is a full
measurement (the load generator's result shape).

    eval "$(.venv/bin/python tests/service_env.py)" && .venv/bin/python benchmarks/ingest_rate.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
os.environ.setdefault("DEBUG", "true")

import django

django.setup()

import websockets  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from agents.hardware import MODEL_PRESETS  # noqa: E402
from agents.runner.outbox import Outbox, SiteEndpoints  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.frozen_job import run_frozen_fields  # noqa: E402
from runs.models import AgentMessageRecord, GpuType, Run, User  # noqa: E402
from runs.selectors.estimates import experiment_estimate  # noqa: E402
from runs.services.catalogue import model_spec_create  # noqa: E402
from runs.services.experiments import experiment_create  # noqa: E402
from runs.services.run_tokens import run_token_issue  # noqa: E402
from runs.services.tenancy import org_create  # noqa: E402
from tests.site.live_server import daphne_server  # noqa: E402

RESULT = {
    "completed": 200,
    "failed": 0,
    "duration": 20.0,
    "request_throughput": 10.0,
    "output_throughput": 2560.0,
    "total_token_throughput": 12800.0,
    **{
        f"{stat}_{metric}_ms": 12.5
        for stat in ("mean", "median", "p90", "p95", "p99")
        for metric in ("ttft", "tpot", "itl", "e2el")
    },
}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def seed(agents: int):
    actor = Actor.system("benchmark")
    owner = User.objects.create_user("owner@bench.example", "bench-password")
    org = org_create(slug="bench", name="Bench", owner=owner, actor=actor)
    model = model_spec_create(org=org, actor=actor, **MODEL_PRESETS["llama-3.1-8b"].registered)
    experiment = experiment_create(
        org=org,
        actor=actor,
        name="ingest",
        model=model,
        gpu_type=GpuType.objects.get(id="NVIDIA H100 80GB HBM3"),
        engine="sim",
        workload={
            "dataset": {"kind": "random", "input_len": 128, "output_len": 128},
            "concurrency": [1],
        },
        budget_cap_usd=10,
    )
    frozen = run_frozen_fields(
        experiment=experiment, estimate=experiment_estimate(experiment=experiment)
    )
    runs = [
        Run.objects.create(organization=org, experiment=experiment, **frozen) for _ in range(agents)
    ]
    return owner, [(run, run_token_issue(run=run)) for run in runs]


def measurement(run_id, seq: int) -> str:
    return json.dumps(
        {
            "type": "measurement",
            "run_id": str(run_id),
            "seq": seq,
            "trial": seq // 50,
            "level": {"concurrency": 1 + seq % 50},
            "result": RESULT,
            "sent_at": time.time(),
        }
    )


async def paced_agent(address: str, run, token: str, count: int, gap: float) -> None:
    """Sends one message every ``gap`` seconds, as a live run does, waiting for each ack."""
    async with websockets.connect(
        f"ws://{address}/ws/agent/runs/{run.id}/",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as socket:
        for seq in range(count):
            await socket.send(measurement(run.id, seq))
            assert json.loads(await socket.recv())["type"] == "ack"
            await asyncio.sleep(gap)


async def outbox_agent(address: str, run, token: str, count: int, gap: float) -> None:
    """The same pace through the agent's real outbox: spool (fsync), journal and socket."""
    with tempfile.TemporaryDirectory() as folder:
        outbox = Outbox(
            run_id=str(run.id),
            spool_dir=Path(folder) / "spool",
            journal_path=Path(folder) / "messages.jsonl",
            site=SiteEndpoints(
                run_id=str(run.id),
                token=token,
                ws_url=f"ws://{address}/ws/agent/runs/{run.id}/",
                rest_url=None,
            ),
        )
        outbox.start()
        for seq in range(count):
            message = {"type": "measurement", "trial": seq // 50, "result": RESULT}
            outbox.emit(message | {"level": {"concurrency": 1 + seq}, "sent_at": time.time()})
            await asyncio.sleep(gap)
        report = await asyncio.to_thread(outbox.close, drain_timeout=30)
        assert report.pending == 0, report


async def paced_round(address: str, run, token: str, cookie: str, sender) -> list[float]:
    """100 messages at 20/s from ``sender`` while a browser watches; the notice delays."""
    delays: list[float] = []
    watcher = asyncio.create_task(watch(address, run, cookie, 100, delays))
    await asyncio.sleep(0.5)  # the browser is subscribed before the first message
    await sender(address, run, token, 100, 0.05)
    await asyncio.wait_for(watcher, 30)
    return delays


async def agent(address: str, run, token: str, count: int) -> None:
    async with websockets.connect(
        f"ws://{address}/ws/agent/runs/{run.id}/",
        additional_headers={"Authorization": f"Bearer {token}"},
    ) as socket:

        async def send_all():
            for seq in range(count):
                await socket.send(measurement(run.id, seq))

        sender = asyncio.create_task(send_all())
        for _ in range(count):
            reply = json.loads(await socket.recv())
            assert reply["type"] == "ack", reply
        await sender


async def watch(address: str, run, cookie: str, count: int, delays: list[float]) -> None:
    async with websockets.connect(
        f"ws://{address}/ws/runs/{run.id}/",
        additional_headers={"Cookie": cookie},
        origin=f"http://{address}",
    ) as browser:
        for _ in range(count):
            notice = json.loads(await browser.recv())
            delays.append((time.time() - notice["sent_at"]) * 1000)


async def round_of(address, pairs, cookie, count) -> tuple[float, list[float]]:
    delays: list[float] = []
    watchers = [asyncio.create_task(watch(address, pairs[0][0], cookie, count, delays))]
    await asyncio.sleep(0.5)  # the browser is subscribed before the first message
    start = time.perf_counter()
    await asyncio.gather(*(agent(address, run, token, count) for run, token in pairs))
    elapsed = time.perf_counter() - start
    try:
        await asyncio.wait_for(watchers[0], 30)
    except TimeoutError:
        # A flood can overflow the browser's channel (notices are best effort: the page
        # re-reads REST); the delays of those that arrived are still measured.
        print(f"(browser got {len(delays)} of {count} notices in the flood)")
    return elapsed, delays


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000, help="per agent")
    parser.add_argument("--server-log", help="write the server's output to this file")
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        owner, pairs = seed(13)
        web = Client()
        web.force_login(owner)
        cookie = f"sessionid={web.cookies['sessionid'].value}"
        layer = "channels-redis" if os.environ.get("REDIS_URL") else "in-memory"
        print(
            f"database: {connection.vendor}, channel layer: {layer}, "
            f"{args.messages} measurement messages per agent"
        )
        print(
            f"{'agents':>6} {'messages':>9} {'seconds':>8} {'stored/s':>9} "
            f"{'notice p50 ms':>14} {'notice p99 ms':>14}"
        )
        with daphne_server(log_path=args.server_log) as address:
            for agents, chosen in ((1, pairs[:1]), (10, pairs[1:11])):
                elapsed, delays = asyncio.run(round_of(address, chosen, cookie, args.messages))
                total = agents * args.messages
                runs = [run for run, _ in chosen]
                stored = AgentMessageRecord.objects.filter(run__in=runs).count()
                assert stored == total, (stored, total)
                print(
                    f"{agents:6d} {total:9d} {elapsed:8.2f} {total / elapsed:9.0f} "
                    f"{statistics.median(delays):14.1f} {percentile(delays, 0.99):14.1f}"
                )
            # Delay from a measurement leaving the agent to a browser receiving its notice,
            # at a live run's pace (the flood rounds above measure queueing, not delay).
            for (run, token), sender, label in (
                (pairs[11], paced_agent, "paced: 1 agent, 20 messages/s"),
                (pairs[12], outbox_agent, "paced through the agent's outbox (spool, socket), 20/s"),
            ):
                delays = asyncio.run(paced_round(address, run, token, cookie, sender))
                print(
                    f"{label}: notice delay p50 {statistics.median(delays):.1f} ms, "
                    f"p99 {percentile(delays, 0.99):.1f} ms"
                )
    finally:
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
