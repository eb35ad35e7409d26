"""The CLI's other commands and its errors against a live site: one clear line and exit 2
for a bad token or an unreachable site, field-named validation errors, and the token never
printed."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
import threading

import pytest
from django.utils import timezone

from runs.models import AuditEvent, Experiment, Run
from tests.site.conftest import H100, frozen, make_experiment, make_model
from tests.site.live_server import ROOT, daphne_server, free_port
from tests.site.test_celery_worker import broker_queue  # noqa: F401  (no worker: runs queue)

from .conftest import benchsite

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture(scope="module")
def shared_site():
    """One Daphne for the module's tests that enqueue nothing of their own: each test's rows
    are flushed after it, and the server keeps no state of its own between requests."""
    with daphne_server() as address:
        yield f"http://{address}"


@pytest.fixture
def site(request):
    """The site's URL; a test with its own broker queue gets a server started within it (a
    server reads the queue's name from its environment when it starts)."""
    if "broker_queue" not in request.fixturenames:
        yield request.getfixturevalue("shared_site")
        return
    with daphne_server() as address:
        yield f"http://{address}"


def test_it_answers_a_bad_token_with_exit_2_and_one_clear_line(alice, site):
    result = benchsite("experiments", "list", "--verbose", url=site, token="bsk_wrong_0123456789")
    assert result.code == 2
    assert result.err.strip().splitlines()[-1] == (
        "error: the site refused the token (401: Invalid or revoked token.); check "
        "BENCHSITE_TOKEN and that it belongs to this organization"
    )
    assert "bsk_wrong_0123456789" not in result.text
    assert "Traceback" not in result.text


def test_it_never_prints_the_token_even_when_verbose(alice, site):
    result = benchsite("experiments", "list", "--verbose", url=site, token=alice.token)
    assert result.code == 0, result.text
    assert "GET " in result.err  # verbose does log the requests
    assert alice.token not in result.text


def test_it_answers_an_unreachable_site_with_exit_2(alice):
    url = f"http://127.0.0.1:{free_port()}"
    result = benchsite(
        "runs", "show", "00000000-0000-0000-0000-000000000000", url=url, token=alice.token
    )
    assert result.code == 2
    assert result.err.strip() == f"error: cannot reach {url}: [Errno 111] Connection refused"
    assert alice.token not in result.text


def test_it_refuses_bad_gate_arguments_before_starting_anything(alice, site):
    experiment = make_experiment(alice.org)
    for thresholds, complaint in (
        ("p99_tft_ms=10%", "'p99_tft_ms' is not a metric"),
        ("p99_ttft_ms=10", "ends with '%'"),
        ("p99_ttft_ms=0%", "non-zero"),
    ):
        result = benchsite(
            *("runs", "start", str(experiment.id), "--baseline", "last-succeeded"),
            *("--max-regression", thresholds),
            url=site,
            token=alice.token,
        )
        assert result.code == 2 and complaint in result.err, result.text
    no_baseline = benchsite(
        "runs",
        "start",
        str(experiment.id),
        "--baseline",
        "promoted",
        "--max-regression",
        "p99_ttft_ms=10%",
        url=site,
        token=alice.token,
    )
    assert no_baseline.code == 2
    assert "has no approved promotion" in no_baseline.err
    assert not Run.objects.exists()  # nothing was started


def test_it_validates_and_creates_an_experiment_from_yaml(alice, site, tmp_path):
    model = make_model(alice.org)
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"""
name: from-yaml
model: {model.id}
gpu_type: {H100}
engine: vllm
engine_image_tag: v0.11.0
serve_grid:
  max_num_seqs: [64, -1]
workload:
  dataset: {{kind: random, input_len: 512, output_len: 128}}
  concurrency: [1, 8]
  requests_per_level: 50
budget_cap_usd: 25
"""
    )
    result = benchsite("experiments", "validate", "--file", str(bad), url=site, token=alice.token)
    assert result.code == 1, result.text
    lines = result.err.strip().splitlines()
    assert lines[0] == f"{bad}: invalid"
    assert any(line.startswith("serve_grid.max_num_seqs") for line in lines[1:]), result.err

    good = tmp_path / "good.yaml"
    good.write_text(bad.read_text().replace("[64, -1]", "[64, 128]"))
    result = benchsite("experiments", "validate", "-f", str(good), url=site, token=alice.token)
    assert result.code == 0, result.text
    assert "valid — 2 trials × 2 levels" in result.out
    assert not Experiment.objects.exists()  # validating stores nothing

    result = benchsite("experiments", "create", "-f", str(good), url=site, token=alice.token)
    assert result.code == 0, result.text
    experiment = Experiment.objects.get(name="from-yaml")
    assert experiment.serve_grid == {"max_num_seqs": [64, 128]}
    shown = benchsite("experiments", "show", "from-yaml", url=site, token=alice.token)
    assert shown.code == 0 and f"id: {experiment.id}" in shown.out

    again = benchsite("experiments", "create", "-f", str(good), url=site, token=alice.token)
    assert again.code == 2
    assert again.err.splitlines()[0].startswith("error: the site answered 400:")
    assert any(line.strip().startswith("name:") for line in again.err.splitlines()[1:])


def test_it_lists_models_and_exports_the_audit_log(alice, site, tmp_path):
    model = make_model(alice.org)
    listed = benchsite("models", "list", url=site, token=alice.token)
    assert listed.code == 0 and str(model.id) in listed.out
    shown = benchsite("models", "show", model.name, url=site, token=alice.token)
    assert shown.code == 0 and f"hf_repo: {model.hf_repo}" in shown.out

    out = tmp_path / "audit.csv"
    exported = benchsite("audit", "export", "--out", str(out), url=site, token=alice.token)
    assert exported.code == 0, exported.text
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert "model.create" in {row["event"] for row in rows}
    assert not (tmp_path / "audit.csv.part").exists()


def test_it_hides_other_tenants_runs(alice, site):
    experiment = make_experiment(alice.org)
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    result = benchsite("runs", "show", str(run.id), url=site, token=alice.token, org="globex")
    assert result.code == 2
    assert result.err.startswith("error: not found (404)"), result.err


def test_it_cancels_a_queued_run(alice, site):
    experiment = make_experiment(alice.org)
    run = Run.objects.create(organization=alice.org, experiment=experiment, **frozen(experiment))
    result = benchsite(
        "runs", "cancel", str(run.id), "--reason", "not needed", url=site, token=alice.token
    )
    assert result.code == 0, result.text
    run.refresh_from_db()
    assert run.state == "cancelled"


def test_it_lists_and_shows_experiments_of_its_organization_only(alice, charlie, site):
    mine = make_experiment(alice.org, name="mine")
    make_experiment(charlie.org, name="theirs")
    listed = benchsite("experiments", "list", url=site, token=alice.token)
    assert listed.code == 0, listed.text
    header, *rows = listed.out.splitlines()
    assert header.split() == ["id", "name", "engine", "trials", "gpu"]
    # Plain columns, two spaces apart (cells such as the GPU name hold single spaces).
    assert [re.split(r" {2,}", row) for row in rows] == [[str(mine.id), "mine", "vllm", "2", H100]]
    missing = benchsite("experiments", "show", "theirs", url=site, token=alice.token)
    assert missing.code == 2
    assert missing.err.strip() == "error: no experiment named 'theirs' in this organization"


def start_waiting(site: str, token: str, *args: str) -> subprocess.Popen:
    """``runs start … --wait`` as a CI job runs it, left running for the test to act on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHSITE_")}
    env |= {"BENCHSITE_URL": site, "BENCHSITE_TOKEN": token, "BENCHSITE_ORG": "acme"}
    return subprocess.Popen(
        [sys.executable, "-m", "benchsite_cli", "runs", "start", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def started_run(process: subprocess.Popen) -> Run:
    """The run the CLI started, read from its first line (which CI jobs rely on too)."""
    first = process.stdout.readline()
    assert first.startswith("started run "), first + process.stderr.read()
    return Run.objects.get(id=first.split()[2])


@pytest.mark.usefixtures("broker_queue")
def test_it_exits_2_when_the_awaited_run_is_cancelled_or_fails(alice, site, tmp_path):
    # No worker consumes this test's queue: runs stay queued until the test ends them.
    experiment = make_experiment(alice.org)
    waiting = start_waiting(site, alice.token, experiment.name, "--wait", "--poll", "0.2")
    run = started_run(waiting)
    cancel = benchsite(
        "runs", "cancel", str(run.id), "--reason", "ci job cancelled", url=site, token=alice.token
    )
    assert cancel.code == 0, cancel.text
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 2, out + err
    assert err.strip() == f"error: run {run.id} ended cancelled: ci job cancelled"

    waiting = start_waiting(
        site, alice.token, experiment.name, "--poll", "0.2", "--json", str(tmp_path / "r.json")
    )
    run = started_run(waiting)
    Run.objects.filter(id=run.id).update(
        state="failed", failure_reason="engine never became healthy", finished_at=timezone.now()
    )
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 2, out + err
    assert err.strip() == f"error: run {run.id} ended failed: engine never became healthy"
    # The run is still written for the job's artifacts, with no gate.
    body = json.loads((tmp_path / "r.json").read_text())
    assert (body["run"]["state"], body["gate"]) == ("failed", None)

    shown = benchsite(
        "runs", "show", str(run.id), "--json", str(tmp_path / "s.json"), url=site, token=alice.token
    )
    assert shown.code == 0, shown.text
    assert shown.out.startswith(
        f"run {run.id}: failed, cost $0.0000, 0 trials — engine never became healthy"
    )
    assert json.loads((tmp_path / "s.json").read_text())["run"]["id"] == str(run.id)


@pytest.mark.usefixtures("broker_queue")
def test_it_gives_up_waiting_at_the_timeout_with_exit_2(alice, site):
    experiment = make_experiment(alice.org)
    result = benchsite(
        *("runs", "start", experiment.name, "--wait", "--poll", "0.2", "--timeout", "1"),
        url=site,
        token=alice.token,
    )
    assert result.code == 2, result.text
    (run,) = Run.objects.all()
    assert result.err.strip() == (
        f"error: run {run.id} still queued after 1 s; it keeps running (benchsite runs cancel "
        "stops it)"
    )
    assert run.state == "queued"


def test_it_exports_the_audit_log_as_json_filtered_by_event(alice, site):
    make_experiment(alice.org)
    exported = benchsite(
        "audit",
        "export",
        "--format",
        "json",
        "--event",
        "experiment.",
        url=site,
        token=alice.token,
    )
    assert exported.code == 0, exported.text
    events = [json.loads(line) for line in exported.out.splitlines()]  # JSON lines
    assert events and {event["event"] for event in events} == {"experiment.create"}


@pytest.mark.usefixtures("broker_queue")
def test_it_draws_the_progress_as_a_live_line_on_a_terminal(alice, site):
    experiment = make_experiment(alice.org)
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCHSITE_")}
    env |= {"BENCHSITE_URL": site, "BENCHSITE_TOKEN": alice.token, "BENCHSITE_ORG": "acme"}
    env |= {"COLUMNS": "200", "TERM": "xterm"}
    screen, terminal = pty.openpty()
    # No worker: the run stays queued and the CLI gives up after a second.
    command = ("runs", "start", experiment.name, "--wait", "--poll", "0.2", "--timeout", "1")
    process = subprocess.Popen(
        [sys.executable, "-m", "benchsite_cli", *command],
        cwd=ROOT,
        env=env,
        stdout=terminal,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal)
    drawn = bytearray()
    reader = threading.Thread(target=read_until_closed, args=(screen, drawn))
    reader.start()
    err = process.communicate(timeout=60)[1]
    reader.join(timeout=10)
    os.close(screen)
    assert process.returncode == 2 and "still queued after 1 s" in err, err
    text = drawn.decode()
    # Redrawn in place: cursor codes and carriage returns, showing state, trials and spend.
    assert "\x1b[" in text and "\r" in text
    assert re.search(r"run [0-9a-f]{8}: queued · trials 0/2 · levels measured 0 · spend \$0", text)
    assert alice.token not in text


def read_until_closed(fd: int, into: bytearray) -> None:
    """Everything written to a pseudo-terminal until its last writer closes it."""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: the child closed the terminal
            return
        if not chunk:
            return
        into.extend(chunk)


def test_it_runs_one_run_on_another_image_tag_and_leaves_the_experiment_alone(alice, site):
    experiment = make_experiment(alice.org)  # v0.11.0
    result = benchsite(
        *("runs", "start", str(experiment.id), "--image-tag", "v0.12.0", "--reason", "bump"),
        url=site,
        token=alice.token,
    )
    assert result.code == 0, result.text
    run = Run.objects.get(experiment=experiment)
    assert f"started run {run.id} of batching on v0.12.0" in result.out
    engine = run.job_spec["engine"]
    assert (engine["image_tag"], engine["vllm_version"]) == ("v0.12.0", "0.12.0")
    experiment.refresh_from_db()
    assert experiment.engine_image_tag == "v0.11.0"
    event = AuditEvent.objects.get(organization=alice.org, event="run.start")
    assert event.after["image_tag"] == "v0.12.0"
    refused = benchsite(
        *("runs", "start", str(experiment.id), "--image-tag", "v0.12.0;rm"),
        url=site,
        token=alice.token,
    )
    assert refused.code == 2 and "image_tag: Not a valid image tag" in refused.err, refused.text
    simulated = make_experiment(
        alice.org, model=experiment.model, name="sim", engine="sim", engine_image_tag=""
    )
    on_sim = benchsite(
        *("runs", "start", str(simulated.id), "--image-tag", "v0.12.0"), url=site, token=alice.token
    )
    assert on_sim.code == 2 and "Only a vLLM experiment runs an image" in on_sim.err
    assert Run.objects.filter(organization=alice.org).count() == 1
