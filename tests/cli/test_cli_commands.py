"""The CLI's other commands and its errors against a live site: one clear line and exit 2
for a bad token or an unreachable site, field-named validation errors, and the token never
printed."""

from __future__ import annotations

import csv
import io

import pytest

from runs.models import Experiment, Run
from tests.site.conftest import H100, make_experiment, make_model
from tests.site.live_server import daphne_server, free_port

from .conftest import benchsite

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.fixture
def site():
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
    run = Run.objects.create(organization=alice.org, experiment=experiment)
    result = benchsite("runs", "show", str(run.id), url=site, token=alice.token, org="globex")
    assert result.code == 2
    assert result.err.startswith("error: not found (404)"), result.err


def test_it_cancels_a_queued_run(alice, site):
    experiment = make_experiment(alice.org)
    run = Run.objects.create(organization=alice.org, experiment=experiment)
    result = benchsite(
        "runs", "cancel", str(run.id), "--reason", "not needed", url=site, token=alice.token
    )
    assert result.code == 0, result.text
    run.refresh_from_db()
    assert run.state == "cancelled"
