"""``benchsite runs start --wait`` and the regression gate against a live site: a real run
(the API starts it in Daphne, a real Celery worker provisions it on the local provider, the
agent drives the simulator and streams back), then the gate against seeded baselines."""

from __future__ import annotations

import contextlib
import itertools
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.utils import timezone

from runs.actors import Actor
from runs.models import Experiment, Measurement, Membership, Run, Trial
from runs.services.promotions import promotion_approve, promotion_propose
from tests.site.conftest import frozen, make_experiment, make_model
from tests.site.live_server import celery_worker, daphne_server
from tests.site.test_celery_worker import SIM_EXPERIMENT

from .conftest import benchsite

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.needs_redis, pytest.mark.slow]

THRESHOLDS = "p99_ttft_ms=10%,output_throughput=-5%,cost_per_mtok=5%"


@contextlib.contextmanager
def site_and_worker(pods_dir, worker_log) -> Iterator[str]:
    """The site served by Daphne (its URL is yielded) and a real Celery worker renting local
    pods under ``pods_dir`` whose agents run the simulator at 20x (the speed is frozen into a
    run's job where it starts: on the site)."""
    with daphne_server(env={"BENCHSITE_SIM_SPEED": "20"}) as address:
        url = f"http://{address}"
        env = {
            "BENCHSITE_PROVIDER": "local",
            "BENCHSITE_LOCAL_PODS_DIR": str(pods_dir),
            "BENCHSITE_PUBLIC_URL": url,
            "BENCHSITE_SIM_SPEED": "20",
        }
        with celery_worker(worker_log, env=env):
            yield url


def seed_run(experiment, levels_by_config: dict, *, price="3.99") -> Run:
    """A succeeded run written straight to the database: {serve_config json: [result…]}."""
    now = timezone.now()
    run = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        **frozen(experiment),
        state="succeeded",
        reason="seeded baseline",
        price_usd_hr=Decimal(price),
        started_at=now,
        finished_at=now,
    )
    for index, (config, results) in enumerate(levels_by_config.items()):
        trial = Trial.objects.create(
            organization_id=run.organization_id,
            run=run,
            index=index,
            serve_config=json.loads(config),
            outcome="succeeded",
            started_at=now,
            finished_at=now,
        )
        for result in results:
            Measurement.objects.create(
                organization_id=trial.organization_id,
                trial=trial,
                concurrency=result["concurrency"],
                result=result,
            )
    return run


def scaled_copy(run: Run, *, ttft: float, throughput: float) -> dict:
    """The run's measurements with p99 TTFT and output throughput (and their intervals)
    multiplied."""
    copied = {}
    for trial in run.trials.order_by("index"):
        results = []
        for measurement in trial.measurements.all():
            result = dict(measurement.result)
            result.pop("simulated", None)  # seeded as if measured on vLLM (promotable)
            # Each figure's 95 % interval moves with it: the gate compares intervals.
            intervals = {key: dict(bounds) for key, bounds in (result.get("ci95") or {}).items()}
            for key, factor in (("p99_ttft_ms", ttft), ("output_throughput", throughput)):
                result[key] = result[key] * factor
                if key in intervals:
                    intervals[key] = {
                        bound: value * factor for bound, value in intervals[key].items()
                    }
            if intervals:
                result["ci95"] = intervals
            results.append(result)
        copied[json.dumps(trial.serve_config)] = results
    return copied


@pytest.mark.usefixtures("sim_over_http")
def test_it_starts_waits_gates_and_fails_on_a_seeded_regression(
    alice,
    broker_queue,
    pods_dir,
    tmp_path,
):
    experiment = make_experiment(alice.org, model=make_model(alice.org), **SIM_EXPERIMENT)
    # A weak baseline: the same configs and levels, every figure far worse than any run's.
    weak = seed_run(
        experiment,
        {
            json.dumps({"max_num_seqs": seqs}): [
                {"concurrency": c, "p99_ttft_ms": 1e6, "output_throughput": 0.01} for c in (1, 4)
            ]
            for seqs in (8, 2)
        },
        price="1000",
    )
    with site_and_worker(pods_dir, tmp_path / "worker.log") as url:
        started = benchsite(
            *("runs", "start", experiment.name, "--reason", "commit abc123", "--poll", "0.5"),
            *("--baseline", str(weak.id), "--max-regression", THRESHOLDS),
            *("--junit", str(tmp_path / "pass.xml"), "--markdown", str(tmp_path / "pass.md")),
            *("--json", str(tmp_path / "run.json")),
            url=url,
            token=alice.token,
        )
        assert started.code == 0, started.text
        body = json.loads((tmp_path / "run.json").read_text())
        run = Run.objects.get(id=body["run"]["id"])
        assert (run.state, run.trigger, run.reason) == ("succeeded", "ci", "commit abc123")
        assert body["gate"]["passed"] is True
        # The waiting display: one plain line per change in a non-interactive log.
        progress = [line for line in started.out.splitlines() if " · trials " in line]
        assert any("benchmarking" in line for line in progress), started.out
        assert any("trials 2/2" in line for line in progress), started.out
        assert all(" · spend $" in line for line in progress), started.out
        assert "\x1b" not in started.text and "\r" not in started.text  # no redraws
        said = [line.rsplit(" · ", 1)[0] for line in progress]  # without the clock
        assert all(a != b for a, b in itertools.pairwise(said)), started.out
        assert "gate passed" in started.out
        assert alice.token not in started.text

        suite = ET.parse(tmp_path / "pass.xml").getroot().find("testsuite")
        cases = suite.findall("testcase")
        # One test case per config × metric: 2 configs × 3 metrics, none failed.
        assert len(cases) == 6 and suite.get("failures") == "0"
        assert {case.get("name") for case in cases} == {
            "p99_ttft_ms",
            "output_throughput",
            "cost_per_mtok",
        }
        assert not any(case.find("failure") is not None for case in cases)
        markdown = (tmp_path / "pass.md").read_text()
        assert markdown.startswith("## Benchsite gate: ✅ within thresholds")
        table = [line for line in markdown.splitlines() if line.startswith("|")]
        assert len(table) == 2 + 2 * 2 * 3  # header, rule, configs × levels × metrics
        assert all(line.count(" | ") == 7 for line in table[2:])

        # A seeded regression: a baseline whose measurements are better than the run's.
        # Ten times the TTFT: beyond the threshold even across the wide interval of a p99
        # from a short window (the gate fails only when the whole interval is beyond it).
        strong = seed_run(experiment, scaled_copy(run, ttft=0.1, throughput=1.5))
        compared = benchsite(
            *("runs", "compare", str(run.id), "--baseline", str(strong.id)),
            *("--max-regression", THRESHOLDS),
            *("--junit", str(tmp_path / "fail.xml"), "--markdown", str(tmp_path / "fail.md")),
            url=url,
            token=alice.token,
        )
        assert compared.code == 1, compared.text
        assert "gate FAILED" in compared.out
        failed_rows = [line for line in compared.out.splitlines() if "REGRESSION" in line]
        assert any("p99_ttft_ms" in line for line in failed_rows), compared.out
        assert any("output_throughput" in line for line in failed_rows), compared.out
        assert "regression: p99_ttft_ms at max_num_seqs=" in compared.err

        suite = ET.parse(tmp_path / "fail.xml").getroot().find("testsuite")
        failing = {
            (case.get("classname"), case.get("name"))
            for case in suite.findall("testcase")
            if case.find("failure") is not None
        }
        assert {name for _, name in failing} == {"p99_ttft_ms", "output_throughput"}
        assert suite.get("failures") == str(len(failing)) == "4"
        assert "❌ regression" in (tmp_path / "fail.md").read_text()

        # A run against itself is within every threshold (no change at all).
        itself = benchsite(
            *("runs", "compare", str(run.id), "--baseline", str(run.id)),
            *("--max-regression", THRESHOLDS),
            url=url,
            token=alice.token,
        )
        assert itself.code == 0, itself.text


def promote(trial: Trial, *, proposer, approver) -> None:
    """The real path: a member proposes, another owner or admin approves."""

    def as_member(person):
        membership = Membership.objects.get(user=person.user, organization=person.org)
        return {"membership": membership, "actor": Actor(user=person.user, via="web", ip="::1")}

    promotion = promotion_propose(trial=trial, **as_member(proposer))
    promotion_approve(promotion=promotion, **as_member(approver))


def weak_levels(**figures) -> list[dict]:
    return [
        {"concurrency": c, "p99_ttft_ms": 1e6, "output_throughput": 0.01} | figures for c in (1, 4)
    ]


STRONG = {"p99_ttft_ms": 1e-3, "output_throughput": 1e9}
ON_VLLM = {"engine": "vllm", "engine_image_tag": "v0.11.0"}
ON_SIM = {"engine": "sim", "engine_image_tag": ""}


def switch(experiment, engine: dict) -> None:
    Experiment.objects.filter(pk=experiment.pk).update(**engine)


def test_it_gates_a_new_run_against_the_approved_promotion(
    alice, mallory, broker_queue, pods_dir, tmp_path
):
    # The simulator's trials cannot be promoted outside a sandbox (its figures are not
    # measurements), so the experiment's history is promoted while it runs vLLM, as in
    # production, and the experiment is then switched to the simulator for the new run to
    # execute here.
    model = make_model(alice.org)
    experiment = make_experiment(alice.org, model=model, **(SIM_EXPERIMENT | ON_VLLM))
    seqs8, seqs2 = json.dumps({"max_num_seqs": 8}), json.dumps({"max_num_seqs": 2})
    # The promoted trial (max_num_seqs=8) is weak; the same run's other trial is impossibly
    # strong: gating against the whole run instead of the promoted trial would fail.
    promoted = seed_run(
        experiment, {seqs8: weak_levels(), seqs2: weak_levels(**STRONG)}, price="1000"
    )
    # Decoys a sloppy lookup would pick: a newer, superseded promotion of this experiment and
    # the newest approved promotion of another experiment, both impossibly strong.
    superseded = seed_run(experiment, {seqs8: weak_levels(**STRONG)})
    other = make_experiment(alice.org, model=model, **(SIM_EXPERIMENT | ON_VLLM), name="other")
    elsewhere = seed_run(other, {seqs8: weak_levels(**STRONG)})
    promoted_trial = promoted.trials.get(index=0)
    with site_and_worker(pods_dir, tmp_path / "worker.log") as url:
        gate_args = ("--baseline", "promoted", "--max-regression", THRESHOLDS)

        # Before anything is approved: exit 2, one clear line, and no run started.
        switch(experiment, ON_SIM)
        refused = benchsite(
            "runs", "start", experiment.name, *gate_args, url=url, token=alice.token
        )
        assert refused.code == 2, refused.text
        assert refused.err.strip() == (
            f"error: --baseline promoted: experiment {experiment.id} has no approved promotion "
            "(propose a trial and have an owner or admin approve it, or use "
            "--baseline last-succeeded)"
        )
        assert not Run.objects.exclude(reason="seeded baseline").exists()

        switch(experiment, ON_VLLM)
        promote(superseded.trials.get(index=0), proposer=mallory, approver=alice)
        promote(promoted_trial, proposer=mallory, approver=alice)  # supersedes the first
        promote(elsewhere.trials.get(index=0), proposer=mallory, approver=alice)
        switch(experiment, ON_SIM)

        started = benchsite(
            *("runs", "start", experiment.name, "--wait", "--poll", "0.5", *gate_args),
            *("--json", str(tmp_path / "run.json"), "--junit", str(tmp_path / "gate.xml")),
            url=url,
            token=alice.token,
        )
        assert started.code == 0, started.text
        body = json.loads((tmp_path / "run.json").read_text())
        gate = body["gate"]
        assert (gate["passed"], gate["baseline"], gate["baseline_run"]) == (
            True,
            "promoted (trial 0)",
            str(promoted.id),
        )
        # Only the promoted configuration is gated, at both levels; the other is listed.
        assert {(row["config"], row["level"]) for row in gate["rows"]} == {
            ("max_num_seqs=8", "concurrency=1"),
            ("max_num_seqs=8", "concurrency=4"),
        }
        assert gate["configs_without_baseline"] == ["max_num_seqs=2"]
        assert "not gated (no baseline): max_num_seqs=2" in started.out
        # The new run ran on the local provider: no billed rate, so cost says n/a, and why.
        run_id = body["run"]["id"]
        assert body["run"]["price_usd_hr"] is None
        assert {row["verdict"] for row in gate["rows"] if row["metric"] == "cost_per_mtok"} == {
            "n/a"
        }
        assert (
            f"not compared: cost_per_mtok n/a at every level: the new run {run_id} has no "
            "billed pod rate (the local provider bills nothing), so cost is not gated"
        ) in started.out
        suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
        cases = suite.findall("testcase")
        (cost,) = [case for case in cases if case.get("name") == "cost_per_mtok"]
        assert "no billed pod rate" in cost.find("skipped").get("message")
        assert (suite.get("failures"), suite.get("skipped")) == ("0", "1")

        # A seeded regression: the newly approved promotion is better than the run.
        run = Run.objects.get(id=run_id)
        switch(experiment, ON_VLLM)
        # Ten times the TTFT: beyond the threshold even across the wide interval of a p99
        # from a short window (the gate fails only when the whole interval is beyond it).
        strong = seed_run(experiment, scaled_copy(run, ttft=0.1, throughput=1.5))
        better = strong.trials.get(serve_config={"max_num_seqs": 8})
        promote(better, proposer=mallory, approver=alice)
        compared = benchsite("runs", "compare", run_id, *gate_args, url=url, token=alice.token)
        assert compared.code == 1, compared.text
        assert f"gate FAILED: run {run_id} vs promoted" in compared.out
        failed_rows = [line for line in compared.out.splitlines() if "REGRESSION" in line]
        # Both figures are seeded ten- and 1.5-fold better; which of them the gate can call
        # beyond its threshold depends on how wide the new run's intervals came out (a loaded
        # machine widens a short window's p99), so at least one must, and nothing else.
        failed_metrics = {line.split()[2] for line in failed_rows}
        assert failed_metrics and failed_metrics <= {"p99_ttft_ms", "output_throughput"}
        assert all(line.startswith("max_num_seqs=8 ") for line in failed_rows)
        named = [line for line in compared.err.splitlines() if line.startswith("regression: ")]
        assert named and all(
            line.split()[1] in failed_metrics and " at max_num_seqs=8 concurrency=" in line
            for line in named
        ), compared.err
