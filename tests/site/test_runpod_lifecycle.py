"""What holds for every run on Runpod whatever else happens (issue 6), driven through the
whole path: the API starts the run, the provisioning task (eager) rents the pod with the real
``runpod`` SDK from the fake Runpod API, the pod runs the real agent with the simulator
standing in for vLLM, the agent streams into Daphne, and ``run_finalize`` / ``runs_reconcile``
give the pod back.

- An organization's Runpod key serves its own runs only, even when two organizations start
  runs at the same moment.
- A cancel from the API terminates the pod within one reconcile period when the agent obeys,
  and at the end of the cancel grace when the agent never answers.
- A budget cap holds: a run over it is refused before anything is rented, and a run that
  reaches it mid-run stops with its measurements kept and is billed to the second.
"""

from __future__ import annotations

import datetime
import itertools
import re
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from decimal import ROUND_HALF_EVEN, Decimal

import pytest
from django.db import connections
from django.db.models import F

from runs.costs import billed_seconds, month_bounds_utc, month_start
from runs.models import Measurement, ModelSpec, Run
from runs.models.runs import TERMINAL_RUN_STATES
from runs.providers.base import pod_name
from runs.selectors.estimates import experiment_estimate
from runs.selectors.spend import org_month_spend_usd
from runs.services.budgets import budget_set
from runs.services.reconcile import runs_reconcile
from tests.fakes.runpod_api import CREATE
from tests.polling import wait_for

from .conftest import SYSTEM, frozen, make_experiment, make_model
from .db_state import database_state
from .live_server import celery_worker, daphne_server
from .runpod_setup import (
    SIM_AGENT,
    fake_runpod,
    post_run,
    runpod_account,
    runpod_site,
    store_runpod_key,
)

pytestmark = pytest.mark.django_db(transaction=True)

ACME_KEY = "rpa_acme_lifecycle_00000000000000aaaa"
GLOBEX_KEY = "rpa_globex_lifecycle_000000000000bbbb"
# One trial is 1 + 4 concurrent users × 8 requests of the simulator at 10x: a few seconds.
TINY_WORKLOAD = {
    "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
    "concurrency": [1, 4],
    "requests_per_level": 8,
}
SLEEPING_AGENT = [sys.executable, "-c", "import time; time.sleep(600)"]
CENT = Decimal("0.01")


def tiny_experiment(person, *, name: str = "lifecycle", trials: int = 1, **overrides):
    """A vLLM experiment (real money: budget rules apply) whose pod's agent swaps in the
    simulator, so a trial is over in seconds."""
    model = ModelSpec.objects.filter(organization=person.org).first() or make_model(person.org)
    fields = dict(
        name=name,
        model=model,
        serve_grid={"max_num_seqs": [8, 2][:trials]},
        workload=TINY_WORKLOAD,
        slos={"ttft_ms": 2000},
    )
    return make_experiment(person.org, **(fields | overrides))


def cancel(person, run, reason: str):
    return person.client().post(
        f"/api/v1/orgs/{person.org.slug}/runs/{run.id}/cancel/", {"reason": reason}, format="json"
    )


def measurement_ids(run) -> set[int]:
    return set(Measurement.objects.filter(trial__run=run).values_list("id", flat=True))


def ended(run) -> bool:
    run.refresh_from_db()
    return run.state in TERMINAL_RUN_STATES


def hand_cost(seconds: Decimal, usd_per_hr: Decimal) -> Decimal:
    """docs/costs.md by hand: seconds × rate ÷ 3600, rounded once to 0.0001, half to even."""
    return (seconds * usd_per_hr / 3600).quantize(Decimal("0.0001"), rounding=ROUND_HALF_EVEN)


def assert_billed_to_the_second(run, usd_per_hr: Decimal) -> None:
    run.refresh_from_db()
    assert run.pod_terminated_at is not None
    seconds = billed_seconds(run.pod_started_at, run.pod_terminated_at)
    assert seconds > 0 and Decimal(str(run.billed_seconds)) == seconds
    assert run.price_usd_hr == usd_per_hr
    assert run.cost_usd == hand_cost(seconds, usd_per_hr)


# ------------------------------------------------------------------------------------------
# Keys: each organization's runs use its own key, and only those
# ------------------------------------------------------------------------------------------


@pytest.mark.needs_redis
@pytest.mark.slow
def test_it_uses_each_organizations_own_key_when_two_start_runs_at_once(
    alice, charlie, settings, monkeypatch, tmp_path, own_broker_queue
):
    # Every answer 0.3 s late, so the two provisionings' SDK calls take turns on the
    # process-wide key instead of one organization finishing before the other begins.
    with (
        fake_runpod(
            (ACME_KEY, GLOBEX_KEY),
            agent_command=SIM_AGENT,
            monkeypatch=monkeypatch,
            settings=settings,
            pods_dir=tmp_path / "pods",
            latency=0.3,
        ) as fake,
        daphne_server() as address,
    ):
        settings.BENCHSITE_PUBLIC_URL = f"http://{address}"
        people = {ACME_KEY: alice, GLOBEX_KEY: charlie}
        experiments = {}
        for key, person in people.items():
            store_runpod_key(person, key)
            experiments[key] = tiny_experiment(person)
        barrier = threading.Barrier(len(people))

        def start_at_once(key):
            try:
                barrier.wait(timeout=60)
                return post_run(people[key], experiments[key])
            finally:
                connections.close_all()  # this thread's connection, before the DB is dropped

        with ThreadPoolExecutor(len(people)) as pool:
            responses = dict(zip(people, pool.map(start_at_once, people), strict=True))
        for response in responses.values():
            assert response.status_code == 201, response.json()
        runs = {key: Run.objects.get(id=responses[key].json()["id"]) for key in people}

        # Each pod was rented in its own organization's account, and only there.
        pods = {}
        for key, run in runs.items():
            run.refresh_from_db()
            assert run.state != "failed", run.failure_reason
            assert [pod.name for pod in fake.pods(key)] == [pod_name(run.id)], key
            (pods[key],) = fake.pods(key)
            assert run.pod_id == pods[key].id
        # The provisionings overlapped: their requests interleave in the fake's log.
        keys_in_order = [request.api_key for request in fake.requests]
        turns = sum(a != b for a, b in itertools.pairwise(keys_in_order))
        assert turns > 1, keys_in_order  # not one organization's calls, then the other's

        for key, run in runs.items():
            wait_for(lambda run=run: ended(run), 240, f"{people[key].org.slug}'s run to end")
            assert run.state == "succeeded", (run.failure_reason, fake.agent_log(run.pod_id))
            assert len(measurement_ids(run)) == 2  # one trial, two load levels

        report = runs_reconcile()
        assert sorted(report.released) == sorted(str(run.id) for run in runs.values())
        assert report.errors == [] and report.orphans_terminated == []
        for key in people:
            assert fake.pods(key) == []  # terminated: gone from each account

    # Every request was made with one of the two keys, and every request about a run's pod
    # (creating it by name, reading or terminating it by id) with that run's key.
    owner = {}
    for key, run in runs.items():
        owner[pod_name(run.id)] = owner[pods[key].id] = key
    assert {request.api_key for request in fake.requests} == set(people)
    for request in fake.requests:
        about = request.pod_id or (request.arguments or {}).get("name")
        if about is not None:
            assert request.api_key == owner[about], request
    for key in people:
        operations = {request.operation for request in fake.requests_with(key)}
        assert {CREATE, "podTerminate"} <= operations, (key, operations)
    terminated = {r.pod_id: r.api_key for r in fake.requests if r.operation == "podTerminate"}
    assert terminated == {pods[key].id: key for key in people}
    for key, run in runs.items():
        assert_billed_to_the_second(run, pods[key].cost_per_hr)


# ------------------------------------------------------------------------------------------
# Cancel: the pod goes within one reconcile period
# ------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("sim_over_http")
@pytest.mark.needs_redis
@pytest.mark.slow
def test_a_cancel_terminates_the_pod_within_one_reconcile_period_and_keeps_the_results(
    alice, settings, monkeypatch, tmp_path, own_broker_queue, record_property
):
    period = settings.CELERY_BEAT_SCHEDULE["runs-reconcile"]["schedule"]
    with (
        runpod_site(
            alice, ACME_KEY, monkeypatch=monkeypatch, settings=settings, tmp_path=tmp_path
        ) as fake,
        celery_worker(tmp_path / "worker.log", timeout=120),
    ):
        response = post_run(alice, tiny_experiment(alice, trials=2))
        assert response.status_code == 201, response.json()
        run = Run.objects.get(id=response.json()["id"])
        wait_for(lambda: measurement_ids(run), 240, "the first measurement")
        kept = measurement_ids(run)

        asked = time.monotonic()
        response = cancel(alice, run, "wrong grid")
        assert response.status_code == 200, response.json()
        assert response.json()["state"] == "benchmarking"  # the agent ends it, not the API
        # The agent stops and reports, ingest ends the run and enqueues run_finalize, the
        # worker terminates the pod. Nothing else would: no reconcile runs in here.
        wait_for(
            lambda: not fake.pods(ACME_KEY),
            period,
            f"the pod to be terminated within one reconcile period ({period} s)",
        )
        elapsed = time.monotonic() - asked
        assert elapsed < period
        record_property("cancel_to_pod_terminated_seconds", round(elapsed, 2))
        print(f"cancel → pod terminated: {elapsed:.2f} s")
        # The fake's answer reaches the worker before the worker writes the row.
        wait_for(lambda: ended(run) and run.pod_terminated_at, 30, "the release to be recorded")

    # It was the worker's run_finalize, enqueued by ingest in Daphne, that released the pod.
    worker_log = (tmp_path / "worker.log").read_text()
    assert re.search(
        r"Task runs\.tasks\.run_finalize\[[0-9a-f-]+\] succeeded in .*: True", worker_log
    )
    assert run.state == "cancelled", (run.failure_reason, fake.agent_log(run.pod_id))
    assert "wrong grid" in run.failure_reason
    assert kept <= measurement_ids(run)  # what was measured before the cancel stays
    [terminate] = [r for r in fake.requests if r.operation == "podTerminate"]
    assert (terminate.api_key, terminate.pod_id) == (ACME_KEY, run.pod_id)
    assert_billed_to_the_second(run, Decimal("3.99"))


def test_a_cancel_the_agent_never_answers_ends_the_run_after_the_grace(
    alice, settings, monkeypatch, tmp_path
):
    with runpod_account(
        alice,
        ACME_KEY,
        agent_command=SLEEPING_AGENT,
        monkeypatch=monkeypatch,
        settings=settings,
        tmp_path=tmp_path,
    ) as fake:
        response = post_run(alice, tiny_experiment(alice))
        assert response.status_code == 201, response.json()
        run = Run.objects.get(id=response.json()["id"])
        (pod,) = fake.pods(ACME_KEY)
        assert pod.process is not None and pod.process.poll() is None

        response = cancel(alice, run, "changed my mind")
        assert response.status_code == 200, response.json()
        run.refresh_from_db()
        assert run.state == "provisioning" and run.cancel_requested_at is not None
        grace = datetime.timedelta(seconds=settings.BENCHSITE_CANCEL_GRACE_SECONDS)
        second = datetime.timedelta(seconds=1)

        # Within the grace the agent may still report: nothing is ended, the pod stays.
        report = runs_reconcile(now=run.cancel_requested_at + grace - second)
        assert (report.cancelled, report.released, report.errors) == ([], [], [])
        assert fake.pods(ACME_KEY) == [pod]

        report = runs_reconcile(now=run.cancel_requested_at + grace + second)
        assert report.cancelled == [str(run.id)] == report.released, report
        assert fake.pods(ACME_KEY) == []
        assert pod.process.poll() is not None  # the pod's process went with it

    run.refresh_from_db()
    assert (run.state, run.failure_reason) == ("cancelled", "changed my mind")
    [terminate] = [r for r in fake.requests if r.operation == "podTerminate"]
    assert (terminate.api_key, terminate.pod_id) == (ACME_KEY, pod.id)
    assert_billed_to_the_second(run, pod.cost_per_hr)


# ------------------------------------------------------------------------------------------
# Budget: refused up front, stopped mid-run
# ------------------------------------------------------------------------------------------


def test_it_refuses_a_run_over_a_cap_before_anything_reaches_runpod(
    alice, settings, monkeypatch, tmp_path
):
    with runpod_account(
        alice,
        ACME_KEY,
        agent_command=SLEEPING_AGENT,
        monkeypatch=monkeypatch,
        settings=settings,
        tmp_path=tmp_path,
    ) as fake:
        over_cap = tiny_experiment(alice, name="over-cap", budget_cap_usd=CENT)
        estimate = experiment_estimate(experiment=over_cap).cost_usd
        assert estimate > CENT
        # The month: $0.40 already spent (a run earlier this month) of a $0.50 budget.
        within_cap = tiny_experiment(alice, name="within-cap", budget_cap_usd=Decimal(50))
        Run.objects.create(
            organization=alice.org,
            experiment=within_cap,
            **frozen(within_cap),
            state="succeeded",
            cost_usd=Decimal("0.4000"),
        )
        budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal("0.50"))
        assert Decimal("0.40") + estimate > Decimal("0.50")
        before = database_state()

        response = post_run(alice, over_cap)
        assert response.status_code == 400, response.json()
        assert response.json()["error"]["fields"]["budget"] == [
            f"The run's estimated cost ${estimate.quantize(CENT)} exceeds the experiment's "
            "cap $0.01 (budget_cap_usd)."
        ]
        response = post_run(alice, within_cap)
        assert response.status_code == 400, response.json()
        [message] = response.json()["error"]["fields"]["budget"]
        month = month_start(datetime.datetime.now(datetime.UTC))
        assert message == (
            f"The organization's budget for {month:%B %Y} is $0.50: $0.40 spent, $0.00 "
            f"committed to runs under way, and this run's estimate is "
            f"${estimate.quantize(CENT)}."
        )
        assert database_state() == before
    assert fake.requests == []  # not even a price lookup or a pod listing
    assert fake.all_pods() == []


@pytest.mark.usefixtures("sim_over_http")
@pytest.mark.needs_redis
@pytest.mark.slow
def test_it_stops_a_run_at_its_cap_mid_run_keeping_its_results_and_billing_it_exactly(
    alice, charlie, settings, monkeypatch, tmp_path, own_broker_queue
):
    cap = Decimal("1.00")
    with runpod_site(
        alice, ACME_KEY, monkeypatch=monkeypatch, settings=settings, tmp_path=tmp_path
    ) as fake:
        # A vLLM experiment (the site budgets it as real money; only the pod's agent knows
        # it runs the simulator), with a cap its estimate fits under.
        experiment = tiny_experiment(alice, trials=2, budget_cap_usd=cap)
        assert experiment_estimate(experiment=experiment).cost_usd <= cap
        response = post_run(alice, experiment)
        assert response.status_code == 201, response.json()
        run = Run.objects.get(id=response.json()["id"])
        assert run.job_spec["engine"]["kind"] == "vllm"
        (pod,) = fake.pods(ACME_KEY)
        wait_for(lambda: measurement_ids(run), 240, "the first measurement")
        kept = measurement_ids(run)

        # The pod has been up for as long as the cap buys at its billed rate: its start
        # moves back by that many seconds (the clock, not the rate, is what is faked).
        seconds_to_cap = int(cap * 3600 / pod.cost_per_hr) + 1
        Run.objects.filter(id=run.id).update(
            pod_started_at=F("pod_started_at") - datetime.timedelta(seconds=seconds_to_cap)
        )
        report = runs_reconcile()
        assert report.over_budget == [str(run.id)] == report.released, report
        assert fake.pods(ACME_KEY) == []
        run.refresh_from_db()
        assert run.state == "over_budget", (run.failure_reason, fake.agent_log(pod.id))
        assert run.failure_reason == f"Stopped at the budget cap (${cap})."
        assert kept and kept <= measurement_ids(run)

    [terminate] = [r for r in fake.requests if r.operation == "podTerminate"]
    assert (terminate.api_key, terminate.pod_id) == (ACME_KEY, pod.id)
    assert_billed_to_the_second(run, pod.cost_per_hr)
    assert run.cost_usd >= cap

    # The month's spend: this run, and another of acme's at the very start of the month;
    # not acme's run a microsecond earlier (last month), not globex's.
    month = month_start(run.created_at)
    first_instant, _ = month_bounds_utc(month)
    earlier = dict(
        experiment=experiment, **frozen(experiment), state="succeeded", cost_usd=Decimal("0.2500")
    )
    Run.objects.create(organization=alice.org, created_at=first_instant, **earlier)
    last_month = first_instant - datetime.timedelta(microseconds=1)
    Run.objects.create(
        organization=alice.org, created_at=last_month, **(earlier | {"cost_usd": Decimal(7)})
    )
    theirs = make_experiment(charlie.org, model=make_model(charlie.org))
    Run.objects.create(
        organization=charlie.org,
        experiment=theirs,
        **frozen(theirs),
        state="over_budget",
        cost_usd=Decimal(9),
    )
    seconds = billed_seconds(run.pod_started_at, run.pod_terminated_at)
    expected = hand_cost(seconds, Decimal("3.99")) + Decimal("0.2500")
    assert org_month_spend_usd(org=alice.org, month=month) == expected
