"""The gate over runs that measured their grid on several vLLM images (issue 17): one serve
configuration on two images is two configurations (``v0.12.0 · max_num_seqs=8``), runs of one
image keep their plain labels, and every table names the images each row compared."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from decimal import Decimal

import pytest
from django.utils import timezone

from benchsite_cli.gate import gate_compare, parse_thresholds, result_columns, row_cells
from benchsite_cli.gate_files import junit_write, markdown_write
from benchsite_cli.runs import _print_run_summary
from runs.models import Measurement, Run, Trial
from tests.site.conftest import frozen, make_experiment, make_model
from tests.site.live_server import daphne_server

from .conftest import benchsite

OLD, NEW = "v0.11.0", "v0.12.0"
SEQS8 = {"max_num_seqs": 8}
THRESHOLDS = "p99_ttft_ms=10%"


def run(run_id: str, trials: list[tuple[str, dict, float]]) -> dict:
    """A run detail as the API answers it: per trial (image tag, serve config, p99 TTFT)."""
    return {
        "id": run_id,
        "state": "succeeded",
        "price_usd_hr": None,
        "trials": [
            {
                "index": index,
                "serve_config": config,
                "image_tag": image,
                "measurements": [{"concurrency": 1, "result": {"p99_ttft_ms": ttft}}],
            }
            for index, (image, config, ttft) in enumerate(trials)
        ],
    }


def gate(new, base):
    return gate_compare(
        new_run=new, baseline_run=base, thresholds=parse_thresholds(THRESHOLDS), baseline_kind="x"
    )


def verdicts(result) -> list[tuple[str, str, str]]:
    return [(row.config, row.image, row.verdict) for row in result.rows]


def test_two_runs_of_two_images_pair_image_with_image():
    base = run("base", [(OLD, SEQS8, 100.0), (NEW, SEQS8, 100.0)])
    # The newer image regressed; the older did not: only its row fails.
    new = run("new", [(OLD, SEQS8, 100.0), (NEW, SEQS8, 150.0)])
    result = gate(new, base)
    assert verdicts(result) == [
        (f"{OLD} · max_num_seqs=8", OLD, "ok"),
        (f"{NEW} · max_num_seqs=8", NEW, "regression"),
    ]
    assert result.unmatched_configs == []
    # A regression of the older image is not hidden by the newer one's (they used to share
    # one key, the last trial's levels standing for both).
    swapped = run("new", [(OLD, SEQS8, 150.0), (NEW, SEQS8, 100.0)])
    assert [row.verdict for row in gate(swapped, base).rows] == ["regression", "ok"]


def test_runs_of_one_image_keep_their_plain_labels_and_name_the_images_compared():
    base = run("base", [(OLD, SEQS8, 100.0)])
    upgraded = run("new", [(NEW, SEQS8, 105.0), (NEW, {"max_num_seqs": 16}, 1.0)])
    result = gate(upgraded, base)
    assert verdicts(result) == [("max_num_seqs=8", f"{OLD} → {NEW}", "ok")]
    assert result.unmatched_configs == ["max_num_seqs=16"]
    same = gate(run("new", [(OLD, SEQS8, 100.0)]), base)
    assert verdicts(same) == [("max_num_seqs=8", OLD, "ok")]
    assert same.as_json()["rows"][0]["image"] == OLD


def test_every_image_of_the_new_run_is_gated_against_a_baseline_of_one():
    base = run("base", [(OLD, SEQS8, 100.0), (OLD, {"max_num_seqs": 16}, 100.0)])
    # max_num_seqs=16 stopped working on the newer image: missing there, and only there.
    new = run(
        "new",
        [(OLD, SEQS8, 100.0), (OLD, {"max_num_seqs": 16}, 100.0), (NEW, SEQS8, 200.0)],
    )
    result = gate(new, base)
    assert verdicts(result) == [
        (f"{OLD} · max_num_seqs=16", OLD, "ok"),
        (f"{OLD} · max_num_seqs=8", OLD, "ok"),
        (f"{NEW} · max_num_seqs=16", f"{OLD} → {NEW}", "missing"),
        (f"{NEW} · max_num_seqs=8", f"{OLD} → {NEW}", "regression"),
    ]
    # A baseline of two images against a run of one: each baseline image gated against it.
    reverse = gate(
        run("new", [(NEW, SEQS8, 100.0)]), run("base", [(OLD, SEQS8, 100.0), (NEW, SEQS8, 50.0)])
    )
    assert verdicts(reverse) == [
        (f"{OLD} · max_num_seqs=8", f"{OLD} → {NEW}", "ok"),
        (f"{NEW} · max_num_seqs=8", NEW, "regression"),
    ]


def test_the_tables_show_an_image_column_only_when_a_run_names_an_image(tmp_path):
    base = run("base", [(OLD, SEQS8, 100.0), (NEW, SEQS8, 100.0)])
    result = gate(run("new", [(OLD, SEQS8, 100.0), (NEW, SEQS8, 150.0)]), base)
    assert result_columns(result)[:2] == ("image", "config")
    assert [row_cells(row, image=True)[:2] for row in result.rows] == [
        (OLD, "max_num_seqs=8"),
        (NEW, "max_num_seqs=8"),
    ]
    markdown_write(result, tmp_path / "gate.md", run={"state": "succeeded"})
    lines = (tmp_path / "gate.md").read_text().splitlines()
    assert (
        "| Image | Config | Level | Metric | Baseline | New | Change | Limit | Verdict |" in lines
    )
    assert "|---|---|---|---|---:|---:|---:|---:|---|" in lines
    assert [line.split(" | ")[:3] for line in lines if line.startswith("| v0.")] == [
        [f"| {OLD}", "max_num_seqs=8", "concurrency=1"],
        [f"| {NEW}", "max_num_seqs=8", "concurrency=1"],
    ]
    junit_write(result, tmp_path / "gate.xml", run={})
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    cases = suite.findall("testcase")
    assert [(case.get("classname"), case.find("failure") is not None) for case in cases] == [
        (f"{OLD} · max_num_seqs=8", False),
        (f"{NEW} · max_num_seqs=8", True),
    ]
    # Runs that name no image (the simulator's, or a site before image tags): no empty column.
    plain = gate(run("new", [("", SEQS8, 100.0)]), run("base", [("", SEQS8, 100.0)]))
    assert result_columns(plain)[0] == "config"


# --- against a live site: the image tags as the API sends them ----------------------------------


def seed_run(experiment, ttfts: dict[str, float]) -> Run:
    """A succeeded run of ``max_num_seqs=8`` on each image of ``ttfts`` (its p99 TTFT there),
    tag-major, billed $3.60/h."""
    now = timezone.now()
    seeded = Run.objects.create(
        organization=experiment.organization,
        experiment=experiment,
        **frozen(experiment),
        state="succeeded",
        price_usd_hr=Decimal("3.6"),
        started_at=now,
        finished_at=now,
    )
    for index, (image, ttft) in enumerate(ttfts.items()):
        trial = Trial.objects.create(
            organization_id=seeded.organization_id,
            run=seeded,
            index=index,
            serve_config=SEQS8,
            image_tag=image,
            outcome="succeeded",
            started_at=now,
            finished_at=now,
        )
        Measurement.objects.create(
            organization_id=trial.organization_id,
            trial=trial,
            concurrency=1,
            result={"p99_ttft_ms": ttft, "output_throughput": 1000.0},
        )
    return seeded


@pytest.mark.django_db(transaction=True)
@pytest.mark.slow
def test_the_cli_gates_each_image_of_a_run_read_from_the_site(alice, tmp_path):
    experiment = make_experiment(
        alice.org,
        model=make_model(alice.org),
        serve_grid={"max_num_seqs": [8]},
        compare_image_tags=[NEW],
    )
    base = seed_run(experiment, {OLD: 100.0, NEW: 100.0})
    new = seed_run(experiment, {OLD: 100.0, NEW: 150.0})
    with daphne_server() as address:
        compared = benchsite(
            *("runs", "compare", str(new.id), "--baseline", str(base.id)),
            *("--max-regression", THRESHOLDS, "--json", str(tmp_path / "gate.json")),
            url=f"http://{address}",
            token=alice.token,
        )
    assert compared.code == 1, compared.text
    table = compared.out[compared.out.index("image ") :].splitlines()
    assert table[0].split()[:3] == ["image", "config", "level"]
    assert [line.split()[:2] for line in table[1:3]] == [
        [OLD, "max_num_seqs=8"],
        [NEW, "max_num_seqs=8"],
    ]
    assert "REGRESSION" in table[2] and "REGRESSION" not in table[1]
    assert f"regression: p99_ttft_ms at {NEW} · max_num_seqs=8 concurrency=1" in compared.err
    rows = json.loads((tmp_path / "gate.json").read_text())["gate"]["rows"]
    assert [(row["config"], row["image"], row["verdict"]) for row in rows] == [
        (f"{OLD} · max_num_seqs=8", OLD, "ok"),
        (f"{NEW} · max_num_seqs=8", NEW, "regression"),
    ]


def test_the_run_summary_names_each_trials_image_when_the_run_measured_several(capsys):
    detail = run("r2", [(OLD, SEQS8, 50.0), (NEW, SEQS8, 40.0)])
    _print_run_summary(detail | {"cost_usd": "1.00"})
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:4] == ["trial", "image", "outcome", "load"]
    assert [line.split()[:2] for line in lines[2:4]] == [["0", OLD], ["1", NEW]]
    # One image: no column for it.
    _print_run_summary(run("r1", [(OLD, SEQS8, 50.0)]) | {"cost_usd": "1.00"})
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["trial", "outcome", "load"]
