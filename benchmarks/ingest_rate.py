"""How many agent messages per second the ingest socket stores into the database per web
process, with many agents at once, and the delay from a measurement leaving an agent to a
browser socket receiving its notice (a bare socket client, then the agent's real outbox with
its fsync'd spool).

Real Daphne servers (each its own process; ``--web``) on a throw-away test database from
DATABASE_URL, sharing the channel layer from REDIS_URL; agents (``--agents`` at once, spread
over the servers in turn) are `websockets` clients that pipeline their messages (as the
agent's spool does) and count acknowledgements. Every message is a full measurement (the load
generator's result shape). The browser watching the first agent's run is served by the last
server, so with several its notices cross the channel layer. Each figure is printed with the
load average before it (the machine may be shared). ``--per-frame N`` sends N messages per
frame, as array frames on a socket opened with the protocol's batch subprotocol (what an
agent's outbox does with whatever queued up; default 50); ``--per-frame 1`` is one message
per frame, as agents of before array frames send.

    eval "$(.venv/bin/python tests/service_env.py)" && .venv/bin/python benchmarks/ingest_rate.py
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
from django.conf import settings  # noqa: E402
from django.db import connection, connections  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402

from agents.hardware import MODEL_PRESETS  # noqa: E402
from agents.protocol import BATCH_SUBPROTOCOL, agent_site_urls, array_frame  # noqa: E402
from agents.runner.outbox import Outbox, SiteEndpoints  # noqa: E402
from runs.actors import Actor  # noqa: E402
from runs.models import AgentMessageRecord, GpuType, Run, User  # noqa: E402
from runs.run_as_started import run_frozen_fields  # noqa: E402
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
    ws_url, rest_url = agent_site_urls(f"http://{address}", run_id=run.id)
    with tempfile.TemporaryDirectory() as folder:
        outbox = Outbox(
            run_id=str(run.id),
            spool_dir=Path(folder) / "spool",
            journal_path=Path(folder) / "messages.jsonl",
            site=SiteEndpoints(
                run_id=str(run.id),
                token=token,
                ws_url=ws_url,
                rest_url=rest_url,  # the agent's epoch is issued there
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


async def agent(address: str, run, token: str, count: int, per_frame: int) -> None:
    """Pipelines ``count`` measurements, ``per_frame`` to a frame (an array frame, on a socket
    opened with the protocol's batch subprotocol, when more than one), and waits for every
    ack."""
    async with websockets.connect(
        f"ws://{address}/ws/agent/runs/{run.id}/",
        additional_headers={"Authorization": f"Bearer {token}"},
        subprotocols=[BATCH_SUBPROTOCOL] if per_frame > 1 else None,
    ) as socket:
        assert (socket.subprotocol == BATCH_SUBPROTOCOL) == (per_frame > 1)

        async def send_all():
            for first in range(0, count, per_frame):
                texts = [
                    measurement(run.id, seq) for seq in range(first, min(first + per_frame, count))
                ]
                await socket.send(texts[0] if per_frame == 1 else array_frame(texts))

        sender = asyncio.create_task(send_all())
        acked = 0
        while acked < count:
            replies = json.loads(await socket.recv())
            replies = replies if isinstance(replies, list) else [replies]
            assert all(reply["type"] == "ack" for reply in replies), replies
            acked += len(replies)
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


async def timed(coroutine) -> float:
    """When ``coroutine`` finished, in ``time.perf_counter`` seconds."""
    await coroutine
    return time.perf_counter()


async def round_of(
    addresses, pairs, cookie, count, per_frame
) -> tuple[float, list[float], list[float]]:
    """Every agent of ``pairs`` at once, agent i on server i mod len(addresses). Returns the
    whole round's seconds, each server's seconds (until its last agent had every ack) and
    the browser's notice delays."""
    delays: list[float] = []
    watcher = asyncio.create_task(watch(addresses[-1], pairs[0][0], cookie, count, delays))
    await asyncio.sleep(0.5)  # the browser is subscribed before the first message
    start = time.perf_counter()
    ends = await asyncio.gather(
        *(
            timed(agent(addresses[i % len(addresses)], run, token, count, per_frame))
            for i, (run, token) in enumerate(pairs)
        )
    )
    elapsed = max(ends) - start
    per_server = [
        max(ends[i :: len(addresses)]) - start for i in range(min(len(addresses), len(pairs)))
    ]
    try:
        await asyncio.wait_for(watcher, 30)
    except TimeoutError:
        # A flood can overflow the browser's channel (notices are best effort: the page
        # re-reads REST); the delays of those that arrived are still measured.
        print(f"(browser got {len(delays)} of {count} notices in the flood)")
    return elapsed, per_server, delays


# How the web processes run with ``--production``: DEBUG off (no SQL kept per query, no
# debug cursor), as a deployment serves. The secret key is this process's own, so that the
# session it signs for the watching browser is valid there.
PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": settings.SECRET_KEY,
    "ALLOWED_HOSTS": "127.0.0.1,localhost",
    "CREDENTIALS_ENCRYPTION_KEY": "ZmRzYWZkc2FmZHNhZmRzYWZkc2FmZHNhZmRzYWZkc2E=",
    "SECURE_SSL_REDIRECT": "false",
    "SESSION_COOKIE_SECURE": "false",
    "CSRF_COOKIE_SECURE": "false",
    "SECURE_HSTS_SECONDS": "0",
}


def load_average() -> str:
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=100, help="agents at once (default 100)")
    parser.add_argument(
        "--messages",
        type=int,
        default=1000,
        help="per agent (default 1000: a flood long enough that the 100 handshakes and each "
        "run's first trial do not set the rate)",
    )
    parser.add_argument("--web", type=int, default=1, help="web processes (default 1)")
    parser.add_argument(
        "--per-frame",
        type=int,
        default=50,
        help="messages per frame (default 50: array frames, as an agent sends what queued up; "
        "1: one message per frame, as agents of before array frames)",
    )
    parser.add_argument("--server-log", help="write the servers' output to this file")
    parser.add_argument(
        "--production",
        action="store_true",
        help="web processes with DEBUG off, as deployed (default: DEBUG on, as in the tests)",
    )
    args = parser.parse_args()
    setup_test_environment()
    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        owner, pairs = seed(args.agents + 2)
        flood, paced = pairs[: args.agents], pairs[args.agents :]
        web = Client()
        web.force_login(owner)
        cookie = f"sessionid={web.cookies['sessionid'].value}"
        layer = "channels-redis" if os.environ.get("REDIS_URL") else "in-memory"
        print(
            f"database: {connection.vendor}, channel layer: {layer}, {args.web} web "
            f"process(es) with DEBUG {'off' if args.production else 'on'}, {args.messages} "
            f"measurement messages per agent, {args.per_frame} per frame"
        )
        with contextlib.ExitStack() as servers:
            addresses = [
                servers.enter_context(
                    daphne_server(
                        log_path=args.server_log, env=PRODUCTION_ENV if args.production else None
                    )
                )
                for _ in range(args.web)
            ]
            loaded = load_average()
            elapsed, per_server, delays = asyncio.run(
                round_of(addresses, flood, cookie, args.messages, args.per_frame)
            )
            total = args.agents * args.messages
            runs = [run for run, _ in flood]
            stored = AgentMessageRecord.objects.filter(run__in=runs).count()
            assert stored == total, (stored, total)
            print(
                f"{args.agents} agents at once: {total} messages stored in {elapsed:.2f} s, "
                f"{total / elapsed:.0f}/s in all, {total / elapsed / args.web:.0f}/s per web "
                f"process (load average before: {loaded}); notice delay in the flood "
                f"p50 {statistics.median(delays):.1f} ms, p99 {percentile(delays, 0.99):.1f} ms"
            )
            for index, seconds in enumerate(per_server):
                share = len(flood[index :: args.web]) * args.messages
                print(
                    f"  web process {index + 1}: {share} messages of its agents in "
                    f"{seconds:.2f} s, {share / seconds:.0f}/s"
                )
            # Delay from a measurement leaving the agent to a browser receiving its notice,
            # at a live run's pace (the flood above measures queueing, not delay).
            for (run, token), sender, label in (
                (paced[0], paced_agent, "paced: 1 agent, 20 messages/s"),
                (paced[1], outbox_agent, "paced through the agent's outbox (spool, socket), 20/s"),
            ):
                delays = asyncio.run(paced_round(addresses[0], run, token, cookie, sender))
                print(
                    f"{label}: notice delay p50 {statistics.median(delays):.1f} ms, "
                    f"p99 {percentile(delays, 0.99):.1f} ms"
                )
    finally:
        connections.close_all()
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
