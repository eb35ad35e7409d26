"""The reconcile pass at scale (issue 6): its queries do not grow with the number of active
runs, and its batched cost UPDATE stays conditional — a run that ended while the pass was
running keeps its final figures. (``benchmarks/reconcile_time.py`` measures 1,000 runs.)"""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import Run
from runs.models.runs import RunState
from runs.providers.base import pod_name
from runs.services import reconcile
from runs.services.reconcile import runs_reconcile

from .conftest import frozen, make_experiment

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_local_pods(settings, tmp_path):
    settings.BENCHSITE_LOCAL_PODS_DIR = tmp_path / "pods"


def running_runs(experiment, count: int) -> list[Run]:
    """Runs on the local provider, an hour into their pod at $3.99/h, heard from just now."""
    now = timezone.now()
    runs = []
    for _ in range(count):
        run_id = uuid.uuid4()
        runs.append(
            Run(
                id=run_id,
                organization=experiment.organization,
                experiment=experiment,
                **frozen(experiment, budget_cap_usd="50"),
                state=RunState.BENCHMARKING,
                provider="local",
                pod_id=pod_name(run_id),
                price_usd_hr=Decimal("3.99"),
                pod_started_at=now - datetime.timedelta(hours=1),
                last_heartbeat_at=now,
            )
        )
    return Run.objects.bulk_create(runs)


def queries_of_a_pass() -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        report = runs_reconcile()
    assert not (report.failed or report.errors or report.over_budget), report
    return [query["sql"] for query in captured.captured_queries]


def test_it_reconciles_30_runs_in_as_many_queries_as_3(alice):
    experiment = make_experiment(alice.org)
    running_runs(experiment, 3)
    few = queries_of_a_pass()
    running_runs(experiment, 27)
    many = queries_of_a_pass()
    assert len(many) == len(few), "\n".join(many)
    for run in Run.objects.all():  # and every cost was brought up to date: about an hour
        assert Decimal("3.99") <= run.cost_usd < Decimal("4.00")
        assert 3600 <= run.billed_seconds < 3700


def test_it_keeps_the_final_cost_of_a_run_that_ended_during_the_pass(alice):
    ended, running = running_runs(make_experiment(alice.org), 2)
    read_by_the_pass = reconcile._active_with_pods()
    # Between the pass's read and its write, the agent reports the end and the pod is
    # released with its final cost.
    Run.objects.filter(id=ended.id).update(
        state=RunState.SUCCEEDED, billed_seconds=60, cost_usd=Decimal("0.0665")
    )
    reconcile._record_costs(read_by_the_pass, timezone.now())
    ended.refresh_from_db()
    running.refresh_from_db()
    assert (ended.billed_seconds, ended.cost_usd) == (60, Decimal("0.0665"))
    assert running.cost_usd >= Decimal("3.99")
