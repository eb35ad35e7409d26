"""A run through the whole Runpod path (issue 6): the API starts it, the provisioning task
rents a pod with the real ``runpod`` SDK from the fake Runpod API, the "pod" runs the real
agent (the simulator standing in for the GPU's vLLM), the agent streams into a real Daphne
server, reconcile gives the pod back and the run's cost comes from the pod's billed rate."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.utils import timezone

from runs.costs import billed_seconds, run_cost_usd
from runs.models import Measurement, Run
from runs.providers.base import pod_name
from runs.selectors.cold_starts import run_cold_start
from runs.services.reconcile import runs_reconcile
from tests.polling import wait_for

from .conftest import make_experiment, make_model
from .runpod_setup import (
    post_run,
    runpod_site,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]

KEY = "rpa_acme_live_0123456789abcdef"


def test_a_run_goes_from_start_to_succeeded_on_runpod_and_is_billed(
    alice, settings, monkeypatch, tmp_path
):
    with runpod_site(
        alice, KEY, monkeypatch=monkeypatch, settings=settings, tmp_path=tmp_path
    ) as fake:
        experiment = make_experiment(
            alice.org,
            model=make_model(alice.org),
            serve_grid={"max_num_seqs": [8, 2]},
            workload={
                "dataset": {"kind": "random", "input_len": 64, "output_len": 16},
                "concurrency": [1, 4],
                "requests_per_level": 8,
            },
            # Judged at p50, which a level of 8 requests can judge (a p99 needs 299).
            slos={"ttft_ms": 2000, "ttft_percentile": 50},
        )
        response = post_run(alice, experiment, "nightly")
        assert response.status_code == 201, response.json()
        run = Run.objects.get(id=response.json()["id"])
        assert run.state != "failed", run.failure_reason
        # Provisioning ran after the commit: one pod, named for the run, rented with our key.
        (pod,) = fake.pods(KEY)
        assert pod.name == pod_name(run.id) and pod.gpu.id == experiment.gpu_type_id
        assert set(pod.env) == {"BENCHSITE_JOB", "BENCHSITE_TOKEN"}
        run.refresh_from_db()
        assert (run.provider, run.pod_id, run.price_usd_hr) == (
            "runpod",
            pod.id,
            Decimal("3.99"),  # the pod's costPerHr: H100 secure × 1 GPU
        )

        def seen_running():
            runs_reconcile()  # a pass while the run is active sees its pod running
            run.refresh_from_db()
            return run.pod_running_at is not None or run.state in ("succeeded", "failed")

        wait_for(seen_running, 120, "a reconcile pass to see the pod running")

        def finished():
            run.refresh_from_db()
            return run.state in ("succeeded", "failed")

        wait_for(finished, 240, "the agent to finish the run")
        log = pod.log_path.read_text() if pod.log_path else ""
        assert run.state == "succeeded", (run.failure_reason, log[-3000:])
        assert Measurement.objects.filter(trial__run=run).count() == 4
        assert all(
            m.result["simulated"] == {"speed": 1.0, "clock": "simulated"}
            for m in Measurement.objects.filter(trial__run=run)
        )

        # The cold start end to end: the provider's, the agent's and the engine's moments.
        steps = [step.label for step in run_cold_start(run)]
        assert steps[:3] == [
            "Pod requested → running (provider)",
            "Container up (the agent's first message)",
            "Agent ready (its first trial starts)",
        ]
        assert "vLLM: health ready" in steps and "Weights downloaded" not in steps
        assert run.pod_started_at < run.pod_running_at <= run.started_at

        report = runs_reconcile()
        assert str(run.id) in report.released
        assert fake.pods(KEY) == []  # terminated: gone from the account
        run.refresh_from_db()
        assert run.pod_terminated_at is not None
        seconds = billed_seconds(run.pod_started_at, run.pod_terminated_at)
        assert Decimal(str(run.billed_seconds)) == seconds > 0
        assert run.cost_usd == run_cost_usd(seconds=seconds, pod_usd_per_hr=Decimal("3.99"))
        assert run.pod_terminated_at <= timezone.now()
