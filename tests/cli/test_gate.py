"""The gate's rules without a site: threshold syntax and signs, pairing by config and level,
a config that stopped working, and well-formed JUnit and Markdown whatever the text."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from benchsite_cli.gate import ThresholdError, gate_compare, parse_thresholds, run_prices
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


class PromotionsApi:
    """The site's answers to ``--baseline promoted``: one approved promotion and its run."""

    def __init__(self, promotion: dict):
        self.promotion = promotion

    def get(self, path, params=None):
        if path == "promotions/":
            return {"results": [self.promotion]}
        return {"id": self.promotion["run"], "trials": []}


@pytest.mark.parametrize(
    ("simulated", "kind"),
    [
        (False, "promoted (trial 2)"),
        (True, "promoted (trial 2, simulated)"),
        (None, "promoted (trial 2)"),
    ],  # a site that predates the field promoted measured trials
)
def test_it_names_a_sandbox_s_simulated_promoted_baseline_as_one(simulated, kind):
    from benchsite_cli.runs import _promoted_baseline

    promotion = {"run": "r1", "trial_index": 2}
    if simulated is not None:
        promotion["simulated"] = simulated
    run, named, trial = _promoted_baseline(PromotionsApi(promotion), "e1")
    assert (run["id"], named, trial) == ("r1", kind, 2)


# --- confidence intervals (issue 16) ----------------------------------------------------------


def level(ttft, ttft_ci, throughput, throughput_ci):
    """One level whose figures carry 95 % intervals (``ci95``), as results do since issue 16."""
    intervals = {}
    if ttft_ci:
        intervals["p99_ttft_ms"] = {"low": ttft_ci[0], "high": ttft_ci[1]}
    if throughput_ci:
        intervals["output_throughput"] = {"low": throughput_ci[0], "high": throughput_ci[1]}
    return [(1, {"p99_ttft_ms": ttft, "output_throughput": throughput, "ci95": intervals})]


CONFIG = {"max_num_seqs": 8}
STEADY_BASE = run("base", [(CONFIG, level(100.0, (99.0, 101.0), 1000.0, (990.0, 1010.0)))])


def gate(new, base=STEADY_BASE, spec="p99_ttft_ms=10%,output_throughput=-5%"):
    return gate_compare(
        new_run=new, baseline_run=base, thresholds=parse_thresholds(spec), baseline_kind="x"
    )


def test_a_regression_whose_interval_straddles_the_threshold_passes_and_says_why():
    # +12 % at the point (the old rule failed it), but the interval reaches down to +8.9 %.
    new = run("new", [(CONFIG, level(112.0, (110.0, 118.0), 1000.0, (990.0, 1010.0)))])
    result = gate(new)
    ttft, throughput = result.rows
    assert not result.failed
    assert ttft.verdict == "ok"
    assert ttft.interval_pct == pytest.approx((110 / 101 * 100 - 100, 118 / 99 * 100 - 100))
    assert ttft.change_text == "worse by 12 % (CI 8.9–19 %)"
    assert ttft.why == "the CI is not beyond the threshold +10%"
    assert throughput.change_text == "within noise (CI −2–+2 %)"
    assert throughput.why == ""


def test_a_regression_inside_the_noise_passes_however_large_its_point():
    base = run("base", [(CONFIG, level(100.0, (90.0, 110.0), 1000.0, (800.0, 1200.0)))])
    new = run("new", [(CONFIG, level(125.0, (100.0, 140.0), 700.0, (600.0, 850.0)))])
    result = gate(new, base)
    assert not result.failed
    assert [row.change_text for row in result.rows] == [
        "within noise (CI −9.1–+56 %)",
        "within noise (CI −50–+6.2 %)",
    ]


def test_a_regression_whose_whole_interval_lies_beyond_the_threshold_fails():
    new = run("new", [(CONFIG, level(125.0, (120.0, 130.0), 900.0, (880.0, 920.0)))])
    result = gate(new)
    ttft, throughput = result.rows
    assert result.failed and (ttft.verdict, throughput.verdict) == ("regression", "regression")
    assert ttft.change_text == "worse by 25 % (CI 19–31 %)"
    assert ttft.why == "the whole CI lies beyond the threshold +10%"
    # Less throughput is worse: the interval's magnitudes, nearest first.
    assert throughput.change_text == "worse by 10 % (CI 7.1–13 %)"
    assert throughput.why == "the whole CI lies beyond the threshold -5%"
    assert result.as_json()["rows"][0]["change_ci95_pct"] == pytest.approx(ttft.interval_pct)


def test_an_improvement_says_better_with_its_interval():
    new = run("new", [(CONFIG, level(80.0, (76.0, 84.0), 1100.0, (1080.0, 1120.0)))])
    ttft, throughput = gate(new).rows
    assert ttft.change_text == "better by 20 % (CI 15–25 %)"
    assert throughput.change_text == "better by 10 % (CI 6.9–13 %)"


def test_results_without_intervals_keep_the_point_rule_and_say_no_interval():
    # The baseline was stored before intervals: the point decides, as before.
    old = run("base", [(CONFIG, levels(100.0, 1000.0))])
    new = run("new", [(CONFIG, level(112.0, (110.0, 118.0), 1000.0, (990.0, 1010.0)))])
    result = gate(new, old)
    ttft, throughput = result.rows
    assert result.failed and ttft.verdict == "regression"
    assert ttft.change_text == "worse by 12 % (no interval)"
    assert ttft.why == "beyond the threshold +10% (no interval: the point decides)"
    assert throughput.change_text == "unchanged (no interval)"
    assert ttft.interval_pct is None


def test_cost_takes_its_interval_from_the_throughputs():
    base = run("base", [(CONFIG, level(100.0, None, 1000.0, (990.0, 1010.0)))], price="3.6")
    new = run("new", [(CONFIG, level(100.0, None, 900.0, (850.0, 920.0)))], price="3.6")
    (cost,) = gate(new, base, "cost_per_mtok=5%").rows
    # $1 per 1M tokens at 1000 tok/s; the cost interval is the throughput's, inverted: the
    # new low (at 920 tok/s) against the baseline's high (at 990 tok/s), and so on.
    assert cost.interval_pct == pytest.approx(((990 / 920 - 1) * 100, (1010 / 850 - 1) * 100))
    assert (cost.verdict, cost.change_text) == ("regression", "worse by 11 % (CI 7.6–19 %)")


def test_the_files_say_the_change_and_its_interval(tmp_path):
    new = run(
        "new",
        [(CONFIG, level(125.0, (120.0, 130.0), 1000.0, (900.0, 1100.0)))],
    )
    result = gate(new)
    junit_write(result, tmp_path / "gate.xml", run=new)
    suite = ET.parse(tmp_path / "gate.xml").getroot().find("testsuite")
    cases = {case.get("name"): case for case in suite.findall("testcase")}
    failure = cases["p99_ttft_ms"].find("failure")
    assert failure.get("message") == (
        "p99_ttft_ms regressed beyond +10% at concurrency=1 (worse by 25 % (CI 19–31 %): the "
        "whole CI lies beyond the threshold +10%)"
    )
    assert "concurrency=1: p99_ttft_ms worse by 25 % (CI 19–31 %): 100 → 125" in failure.text
    assert cases["output_throughput"].find("failure") is None
    assert "output_throughput within noise (CI −11–+11 %)" in (
        cases["output_throughput"].find("system-out").text
    )
    markdown_write(result, tmp_path / "gate.md", run=new)
    rows = [
        line for line in (tmp_path / "gate.md").read_text().splitlines() if line.startswith("| max")
    ]
    assert rows == [
        "| max_num_seqs=8 | concurrency=1 | p99_ttft_ms | 100 | 125 | worse by 25 % (CI 19–31 %) "
        "| +10% | **regression: the whole CI lies beyond the threshold +10%** |",
        "| max_num_seqs=8 | concurrency=1 | output_throughput | 1,000 | 1,000 | within noise "
        "(CI −11–+11 %) | -5% | ok |",
    ]


def searched(run_id, capacity, low, high, answered=True):
    """A run of one config whose capacity search found ``capacity`` in ``[low, high)``."""
    searched_run = run(run_id, [(CONFIG, levels(100.0, 1000.0))])
    searched_run["trials"][0]["capacity"] = {
        "axis": "concurrency",
        "capacity": capacity,
        "bracket_low": low,
        "bracket_high": high,
        "probes": 5,
        "stop_reason": "converged",
    }
    searched_run["answer"] = {"winner": {"trial": 0, "capacity": capacity} if answered else None}
    return searched_run


def test_capacities_at_the_slos_are_compared_for_information_when_both_runs_answer():
    result = gate(searched("new", 4, 4, 6), searched("base", 8, 8, 12), "p99_ttft_ms=10%")
    assert [row.metric for row in result.rows] == ["p99_ttft_ms", "capacity"]
    capacity = result.rows[1]
    assert (capacity.metric, capacity.level) == ("capacity", "at the SLOs (concurrency)")
    assert (capacity.baseline, capacity.new, capacity.verdict) == (8, 4, "info")
    # The brackets are the intervals: [4, 6) against [8, 12) is −67 % to −25 %.
    assert capacity.change_text == "worse by 50 % (CI 25–67 %)"
    assert not result.failed
    # Without an answer on both sides there is nothing to say about capacity.
    unanswered = searched("base", 8, 8, 12, answered=False)
    assert [row.metric for row in gate(searched("new", 4, 4, 6), unanswered).rows] == [
        "p99_ttft_ms",
        "output_throughput",
    ]


def test_a_capacity_threshold_gates_on_the_whole_bracket():
    spec = "capacity=-10%"
    base = searched("base", 8, 8, 12)
    (fell,) = gate(searched("new", 4, 4, 6), base, spec).rows
    assert fell.verdict == "regression" and fell.failed
    assert fell.why == "the whole CI lies beyond the threshold -10%"
    # 7 in [7, 8) against [8, 12): the bracket reaches 0 %, so no regression is shown.
    (near,) = gate(searched("new", 7, 7, 8), base, spec).rows
    assert (near.verdict, near.change_text) == ("ok", "within noise (CI −42–0 %)")
    # A search that found no load meeting the SLOs is 0, below its first failing load.
    (none,) = gate(searched("new", None, None, 1), base, spec).rows
    assert (none.new, none.verdict) == (0.0, "regression")
    # A baseline without a search: said, not silently passed.
    result = gate(searched("new", 4, 4, 6), run("base", [(CONFIG, levels(1.0, 1.0))]), spec)
    assert [row.verdict for row in result.rows] == ["n/a"]
    assert "without a capacity search" in result.not_compared["capacity"]


def test_cost_is_priced_for_the_gpus_a_configuration_uses_whatever_the_pods_size():
    """A TP=1 configuration on a 4-GPU pod pays a quarter of the pod's rate, as the site
    prices it (``GpuShare``): against the same configuration on a 1-GPU pod at the same
    per-GPU price and throughput it costs the same, not four times as much."""
    thresholds = parse_thresholds("cost_per_mtok=5%")
    one = {"max_num_seqs": 8}
    base = run("base", [(one, levels(100.0, 1000.0))], price="3.6") | {
        "job_spec": {"engine": {"gpu_count": 1}}
    }
    four = {"max_num_seqs": 8, "tensor_parallel_size": 4}
    new = run(
        "new", [(one, levels(100.0, 1000.0)), (four, levels(100.0, 3000.0))], price="14.4"
    ) | {"job_spec": {"engine": {"gpu_count": 4}}}
    result = gate_compare(new_run=new, baseline_run=base, thresholds=thresholds, baseline_kind="x")
    (row,) = result.rows
    assert row.new == pytest.approx(1.0) and row.verdict == "ok"
    # TP=4 uses the whole pod: $14.4/h at 3000 tok/s.
    prices = run_prices(new)
    assert prices[("", "max_num_seqs=8")] == pytest.approx(3.6)
    assert prices[("", "max_num_seqs=8 tensor_parallel_size=4")] == pytest.approx(14.4)
    # A run that does not say its pod's GPU count is priced at its pod rate, as it was.
    assert run_prices(run("old", [(one, levels(100.0, 1000.0))], price="14.4")) == {
        ("", "max_num_seqs=8"): "14.4"
    }
