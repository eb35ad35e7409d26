"""The gate's rules without a site: threshold syntax and signs, pairing by config and level,
a config that stopped working, and well-formed JUnit and Markdown whatever the text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from benchsite_cli.gate import ThresholdError, gate_compare, parse_thresholds
from benchsite_cli.gate_files import junit_write, markdown_write


def run(run_id: str, configs: dict, price=None) -> dict:
    return {
        "id": run_id,
        "state": "succeeded",
        "price_usd_hr": price,
        "trials": [
            {
                "index": index,
                "serve_config": config,
                "measurements": [{"concurrency": c, "result": result} for c, result in levels],
            }
            for index, (config, levels) in enumerate(configs)
        ],
    }


def levels(ttft, throughput):
    return [(1, {"p99_ttft_ms": ttft, "output_throughput": throughput})]


def test_it_reads_thresholds_with_their_sign():
    parsed = parse_thresholds("p99_ttft_ms=10%, output_throughput=-5%,cost_per_mtok=5%")
    assert [(t.metric, t.limit_pct) for t in parsed] == [
        ("p99_ttft_ms", 10.0),
        ("output_throughput", -5.0),
        ("cost_per_mtok", 5.0),
    ]


@pytest.mark.parametrize(
    "spec, complaint",
    [
        ("p99_ttft=10%", "not a metric"),
        ("p99_ttft_ms=10", "ends with '%'"),
        ("p99_ttft_ms=ten%", "not a number"),
        ("p99_ttft_ms=0%", "non-zero"),
        ("p99_ttft_ms", "expected METRIC=PERCENT%"),
        ("p99_ttft_ms=1%,p99_ttft_ms=2%", "given twice"),
        ("", "no thresholds"),
    ],
)
def test_it_refuses_a_bad_threshold_naming_the_part(spec, complaint):
    with pytest.raises(ThresholdError, match=complaint):
        parse_thresholds(spec)


def test_a_positive_limit_fails_on_a_rise_and_a_negative_one_on_a_drop():
    config = {"max_num_seqs": 8}
    base = run("base", [(config, levels(100.0, 1000.0))])
    thresholds = parse_thresholds("p99_ttft_ms=10%,output_throughput=-5%")
    within = run("new", [(config, levels(109.0, 960.0))])
    assert not gate_compare(
        new_run=within, baseline_run=base, thresholds=thresholds, baseline_kind="x"
    ).failed
    # Faster and more throughput is never a regression, however large the change.
    better = run("new", [(config, levels(10.0, 5000.0))])
    assert not gate_compare(
        new_run=better, baseline_run=base, thresholds=thresholds, baseline_kind="x"
    ).failed
    worse = run("new", [(config, levels(111.0, 940.0))])
    result = gate_compare(
        new_run=worse, baseline_run=base, thresholds=thresholds, baseline_kind="x"
    )
    assert [(row.metric, row.verdict) for row in result.rows] == [
        ("p99_ttft_ms", "regression"),
        ("output_throughput", "regression"),
    ]


def test_a_config_that_stopped_working_fails_and_a_new_one_is_not_gated():
    base = run("base", [({"max_num_seqs": 8}, levels(100.0, 1000.0))])
    new = run("new", [({"max_num_seqs": 16}, levels(100.0, 1000.0))])
    result = gate_compare(
        new_run=new,
        baseline_run=base,
        thresholds=parse_thresholds("p99_ttft_ms=10%"),
        baseline_kind="x",
    )
    assert [row.verdict for row in result.rows] == ["missing"]
    assert result.failed
    assert result.unmatched_configs == ["max_num_seqs=16"]


def test_cost_per_mtok_comes_from_the_pod_rate_and_is_na_without_one():
    config = {"max_num_seqs": 8}
    thresholds = parse_thresholds("cost_per_mtok=5%")
    base = run("base", [(config, levels(100.0, 1000.0))], price="3.6")
    new = run("new", [(config, levels(100.0, 900.0))], price="3.6")
    (row,) = gate_compare(
        new_run=new, baseline_run=base, thresholds=thresholds, baseline_kind="x"
    ).rows
    # $3.6/h ÷ 3600 ÷ 1000 tok/s × 1e6 = $1 per 1M tokens; at 900 tok/s 11 % dearer.
    assert row.baseline == pytest.approx(1.0)
    assert row.change_pct == pytest.approx(100 / 9)
    assert row.verdict == "regression"
    unpriced = run("new", [(config, levels(100.0, 900.0))])
    (row,) = gate_compare(
        new_run=unpriced, baseline_run=base, thresholds=thresholds, baseline_kind="x"
    ).rows
    assert (row.verdict, row.failed) == ("n/a", False)


def test_the_files_are_well_formed_whatever_the_config_text(tmp_path):
    config = {"kv_cache_dtype": 'a<b>&|"c'}
    base = run("base", [(config, levels(100.0, 1000.0))])
    new = run("new", [(config, levels(200.0, 1000.0))])
    result = gate_compare(
        new_run=new,
        baseline_run=base,
        thresholds=parse_thresholds("p99_ttft_ms=10%,output_throughput=-5%"),
        baseline_kind="promoted",
    )
    junit_write(result, tmp_path / "gate.xml", run=new)
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    (failed,) = [case for case in suite.findall("testcase") if case.find("failure") is not None]
    assert failed.get("classname") == 'kv_cache_dtype="a<b>&|\\"c"'
    assert failed.get("name") == "p99_ttft_ms"
    markdown_write(result, tmp_path / "gate.md", run=new)
    rows = [
        line
        for line in (tmp_path / "gate.md").read_text().splitlines()
        if line.startswith("| kv_cache")
    ]
    assert len(rows) == 2 and all(row.count(" | ") == 7 for row in rows)


@pytest.mark.parametrize("unbilled", [None, "0", "0.0000"])
def test_cost_without_a_billed_rate_says_n_a_and_why_instead_of_passing_silently(
    tmp_path, unbilled
):
    config = {"max_num_seqs": 8}
    base = run("base", [(config, levels(100.0, 1000.0))], price="3.6")
    local = run("local-run", [(config, levels(100.0, 100.0))], price=unbilled)
    result = gate_compare(
        new_run=local,
        baseline_run=base,
        thresholds=parse_thresholds("p99_ttft_ms=10%,cost_per_mtok=5%"),
        baseline_kind="promoted",
    )
    ttft, cost = result.rows
    # A rate of 0 is not "free": a tenth of the throughput would otherwise compare equal.
    assert (cost.verdict, cost.new, cost.failed) == ("n/a", None, False)
    assert ttft.verdict == "ok" and not result.failed
    assert result.not_compared == {
        "cost_per_mtok": "n/a at every level: the new run local-run has no billed pod rate "
        "(the local provider bills nothing), so cost is not gated"
    }
    assert result.as_json()["not_compared"] == result.not_compared

    junit_write(result, tmp_path / "gate.xml", run=local)
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("2", "0", "1")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    assert cases["p99_ttft_ms"].find("skipped") is None
    assert "no billed pod rate" in cases["cost_per_mtok"].find("skipped").get("message")
    markdown_write(result, tmp_path / "gate.md", run=local)
    assert (
        "- `cost_per_mtok`: n/a at every level: the new run local-run has no billed"
        in (tmp_path / "gate.md").read_text()
    )


def test_a_metric_missing_at_some_levels_is_named_with_how_many():
    config = {"max_num_seqs": 8}
    measured = {"p99_ttft_ms": 100.0, "request_goodput": 5.0}
    base = run("base", [(config, [(1, measured), (4, measured)])])
    new = run("new", [(config, [(1, measured), (4, {"p99_ttft_ms": 100.0})])])
    result = gate_compare(
        new_run=new,
        baseline_run=base,
        thresholds=parse_thresholds("request_goodput=-5%"),
        baseline_kind="x",
    )
    assert [row.verdict for row in result.rows] == ["ok", "n/a"]
    assert result.not_compared == {
        "request_goodput": "n/a at 1 of 2 levels: not reported by the load generator, not "
        "gated there"
    }


def test_a_promoted_trial_narrows_the_baseline_and_lists_the_other_configs():
    base = run(
        "base",
        [({"max_num_seqs": 8}, levels(100.0, 1000.0)), ({"max_num_seqs": 2}, levels(1.0, 1e9))],
    )
    new = run(
        "new",
        [({"max_num_seqs": 8}, levels(100.0, 1000.0)), ({"max_num_seqs": 2}, levels(50.0, 10))],
    )
    result = gate_compare(
        new_run=new,
        baseline_run=base,
        thresholds=parse_thresholds("p99_ttft_ms=10%"),
        baseline_kind="promoted (trial 0)",
        baseline_trial=0,
    )
    assert [(row.config, row.verdict) for row in result.rows] == [("max_num_seqs=8", "ok")]
    assert result.unmatched_configs == ["max_num_seqs=2"]
