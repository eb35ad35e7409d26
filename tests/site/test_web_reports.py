"""Managers' pages: report figures against hand-worked ones, CSV equal to the page,
simulated figures kept apart, promotion pages, the audit log viewer, and access rules."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import UTC, datetime
from html import unescape
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client

from runs.models import AuditEvent, Promotion, PromotionState
from runs.selectors.trial_costs import trial_costs
from runs.selectors.trial_figures import trial_figures

from .conftest import _person, make_experiment, signed_in
from .report_data import EXPECTED, add_run, add_trial, build_history, level

REPORTS = ["reports", "reports/costs", "reports/models", "reports/spend"]


class Tables(HTMLParser):
    """The cell texts of every ``report-table`` on a page, by its ``data-table`` key, in the
    CSV's column order: a cell's ``data-col`` places it, whether shown as a column or folded
    into its row's disclosure (where a ``dt`` names its column)."""

    def __init__(self):
        super().__init__()
        self.tables: dict[str, list[list[str]]] = {}
        self._key = None
        self._heads: dict[int, str] = {}
        self._rows: list[dict[int, str]] = []
        self._row = None
        self._cell = None
        self._place = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and "report-table" in (attrs.get("class") or ""):
            self._key, self._heads, self._rows = attrs["data-table"], {}, []
        elif self._key and tag == "tr":
            self._row = {}
        elif self._key and tag in ("th", "td", "dt", "dd") and "data-col" in attrs:
            self._cell, self._place = [], (tag, int(attrs["data-col"]))
        elif self._cell is not None and tag == "span":
            self._cell.append("")  # keeps badge text in the cell

    def handle_endtag(self, tag):
        if tag == "table" and self._key:
            order = sorted(self._heads)
            self.tables[self._key] = [
                [self._heads[i] for i in order],
                *([row.get(i, "") for i in order] for row in self._rows),
            ]
            self._key = None
        elif self._cell is not None and self._place and tag == self._place[0]:
            text = " ".join("".join(self._cell).split())
            kind, index = self._place
            if kind in ("th", "dt"):
                self._heads[index] = text
            else:
                self._row[index] = "" if text == "—" else text
            self._cell = self._place = None
        elif tag == "tr" and self._row is not None and self._key:
            if self._row:
                self._rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def page_tables(response) -> dict[str, list[list[str]]]:
    parser = Tables()
    parser.feed(response.content.decode())
    return parser.tables


def csv_rows(response) -> list[list[str]]:
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    raw = b"".join(response.streaming_content) if response.streaming else response.content
    body = raw.decode("utf-8")
    rows = list(csv.reader(io.StringIO(body, newline="")))
    assert rows and len({len(row) for row in rows}) == 1  # well-formed: one width
    return rows


def as_dicts(rows):
    header, *body = rows
    return [dict(zip(header, row, strict=True)) for row in body]


@pytest.fixture
def history(alice):
    return build_history(alice.org)


# --- Report figures ----------------------------------------------------------------------


def test_it_prices_every_trial_like_the_selector(history, alice, django_assert_max_num_queries):
    # The report reads in a fixed number of queries and gives trial_costs' figures exactly.
    with django_assert_max_num_queries(6):
        figures = trial_figures(org=alice.org)
    assert len(figures) == 5  # the failed trial is left out
    for figure in figures:
        assert figure.cost.usd_per_million_output_tokens == (
            trial_costs(trial=figure.trial).usd_per_million_output_tokens
        )
    assert [f.simulated for f in figures].count(True) == 1


def test_it_reports_the_cost_per_token_of_the_best_config_by_model_and_gpu(history, web):
    response = web.get("/o/acme/reports/costs/")
    assert response.status_code == 200
    measured = as_dicts(page_tables(response)["measured"])
    by_model = {row["Model"]: row for row in measured}
    assert list(by_model) == [
        "Llama 3.1 8B Instruct",
        "Qwen2.5 7B Instruct",
        "Llama 3.1 70B Instruct",
    ]
    for name, key in [
        ("Llama 3.1 8B Instruct", "llama8"),
        ("Qwen2.5 7B Instruct", "qwen7"),
        ("Llama 3.1 70B Instruct", "llama70"),
    ]:
        row = by_model[name]
        assert row["USD / 1M output tokens"] == EXPECTED[key]["steady"]
        assert row["USD / 1M, cold start amortized"] == EXPECTED[key]["amortized"]
        assert row["Pod USD/h"] == EXPECTED[key]["pod"]
        assert row["Output tok/s"] == EXPECTED[key]["tput"]
        assert row["Load at SLOs"] == "concurrency=64"
    small = by_model["Llama 3.1 8B Instruct"]
    assert (
        small["Best config"] == "max_num_seqs=128" and small["GPUs"] == "1× NVIDIA H100 80GB HBM3"
    )
    assert small["Trials priced / compared"] == "2 / 2"
    assert by_model["Llama 3.1 70B Instruct"]["Best config"] == "tensor_parallel_size=2"
    assert by_model["Llama 3.1 70B Instruct"]["GPUs"] == "2× NVIDIA H100 80GB HBM3"


def test_it_leads_the_cost_report_with_the_capacity_answer(history, web):
    history.t128.capacity = {
        "axis": "concurrency",
        "capacity": 96,
        "bracket_low": 96,
        "bracket_high": 104,
        "probes": 3,
        "stop_reason": "converged",
        "output_throughput": 6000.0,
    }
    history.t128.save(update_fields=["capacity"])
    response = web.get("/o/acme/reports/costs/")
    columns, *rows = page_tables(response)["measured"]
    assert columns[2:5] == ["USD / 1M at capacity", "Capacity at SLOs", "USD / 1M output tokens"]
    by_model = {row["Model"]: row for row in as_dicts([columns, *rows])}
    small = by_model["Llama 3.1 8B Instruct"]
    # 3.99 / 3600 / 6000 × 1e6 = 0.184722… → 0.1847, beside the best fixed level's figures.
    assert small["USD / 1M at capacity"] == "0.1847"
    assert small["Capacity at SLOs"] == "concurrency 96 (96–104)"
    assert small["USD / 1M output tokens"] == EXPECTED["llama8"]["steady"]
    assert small["Load at SLOs"] == "concurrency=64"
    # A trial without a capacity search shows none, and is still priced at its fixed level.
    qwen = by_model["Qwen2.5 7B Instruct"]
    assert (qwen["USD / 1M at capacity"], qwen["Capacity at SLOs"]) == ("", "")
    assert qwen["USD / 1M output tokens"] == EXPECTED["qwen7"]["steady"]
    assert "best fixed load level" in response.content.decode()
    exported = as_dicts(csv_rows(web.get("/o/acme/reports/costs/?csv=measured")))
    assert exported[0]["USD / 1M at capacity"] == "0.1847"


def searched(trial, load: float, throughput: float) -> None:
    """``trial``'s capacity search found ``load`` (bracket [load, load + 8)) at ``throughput``."""
    trial.capacity = {
        "axis": "concurrency",
        "capacity": load,
        "bracket_low": load,
        "bracket_high": load + 8,
        "probes": 3,
        "repeats": 1,
        "stop_reason": "converged",
        "output_throughput": throughput,
        "request_throughput": throughput / 100,
        "request_goodput": throughput / 100,
    }
    trial.save(update_fields=["capacity"])


def test_it_ranks_the_cost_report_by_the_cost_at_capacity_first(history, web):
    # max_num_seqs=64 is the dearer at its best fixed level (0.2639 against 0.2217) but the
    # cheaper at capacity: 3.99 / 3600 / 8000 × 1e6 = 0.138541… → 0.1385.
    searched(history.t64, 96, 8000.0)
    # llama-70b at its billed 5.38/h: 5.38 / 3600 / 2000 × 1e6 = 0.747222… → 0.7472, dearer
    # than qwen's fixed level (0.3079) but ranked before it: a capacity ranks first.
    searched(history.tbig, 48, 2000.0)
    response = web.get("/o/acme/reports/costs/")
    rows = as_dicts(page_tables(response)["measured"])
    assert [
        (r["Model"], r["Best config"], r["USD / 1M at capacity"], r["Ranked by"]) for r in rows
    ] == [
        ("Llama 3.1 8B Instruct", "max_num_seqs=64", "0.1385", "capacity"),
        ("Llama 3.1 70B Instruct", "tensor_parallel_size=2", "0.7472", "capacity"),
        ("Qwen2.5 7B Instruct", "max_num_seqs=64", "", "best fixed level"),
    ]
    # The fixed level's figures are still there, under their old names.
    assert rows[0]["USD / 1M output tokens"] == EXPECTED["llama8_64"]["steady"]
    assert rows[0]["Capacity at SLOs"] == "concurrency 96 (96–104)"
    assert rows[2]["USD / 1M output tokens"] == EXPECTED["qwen7"]["steady"]
    assert rows[0]["Trials priced / compared"] == "2 / 2"
    assert "ranked by the cost of their best fixed load level" in response.content.decode()
    exported = as_dicts(csv_rows(web.get("/o/acme/reports/costs/?csv=measured")))
    assert [r["Ranked by"] for r in exported] == ["capacity", "capacity", "best fixed level"]


def test_it_draws_the_pareto_front_by_the_cost_at_capacity(history, web):
    # llama-8b at capacity: 3.99 / 3600 / 2000 × 1e6 = 0.5542, now dearer than the smaller
    # qwen's fixed level (0.3079): qwen is no longer dominated.
    searched(history.t64, 96, 2000.0)
    searched(history.t128, 96, 2000.0)
    response = web.get("/o/acme/reports/models/")
    rows = {r["Model"]: r for r in as_dicts(page_tables(response)["measured"])}
    small = rows["Llama 3.1 8B Instruct"]
    assert (small["USD / 1M at capacity"], small["Ranked by"]) == ("0.5542", "capacity")
    assert small["Capacity at SLOs"] == "concurrency 96 (96–104)"
    # Equal at capacity: the cheaper at its fixed level leads, its figures beside.
    assert small["USD / 1M output tokens"] == EXPECTED["llama8"]["steady"]
    assert rows["Qwen2.5 7B Instruct"]["Ranked by"] == "best fixed level"
    assert rows["Qwen2.5 7B Instruct"]["Pareto front"] == "yes"
    assert rows["Llama 3.1 8B Instruct"]["Pareto front"] == ""


def test_it_never_mixes_simulated_figures_into_cost_reports(history, web):
    for path in ("/o/acme/reports/costs/", "/o/acme/reports/models/"):
        response = web.get(path)
        tables = page_tables(response)
        # The simulated trial is the cheapest of all, yet never ranked with measured ones:
        # 3.99 / 3600 / 9000 × 1e6 = 0.123148… → 0.1231.
        measured_text = str(tables["measured"])
        assert "0.1231" not in measured_text
        simulated = as_dicts(tables["simulated"])
        assert len(simulated) == 1 and simulated[0]["Source"] == "simulated"
        assert simulated[0]["USD / 1M output tokens"] == "0.1231"
        assert 'class="badge badge-simulated"' in response.content.decode()
        chart = re.search(
            r'<script id="[a-z-]+-chart-data"[^>]*>(.*?)</script>', response.content.decode(), re.S
        )
        assert chart and "0.1231" not in chart.group(1)


def test_it_marks_the_pareto_front_of_size_against_cost(history, web):
    response = web.get("/o/acme/reports/models/")
    rows = {r["Model"]: r for r in as_dicts(page_tables(response)["measured"])}
    assert rows["Llama 3.1 70B Instruct"]["Pareto front"] == "yes"
    assert rows["Llama 3.1 8B Instruct"]["Pareto front"] == "yes"
    assert rows["Qwen2.5 7B Instruct"]["Pareto front"] == ""
    assert rows["Llama 3.1 70B Instruct"]["Output tok/s per GPU"] == EXPECTED["llama70_per_gpu"]
    assert rows["Llama 3.1 70B Instruct"]["p99 TTFT ms"] == "420.0"
    # Sizes in billions to 0.01, a number in the CSV too (70,553,706,496 parameters).
    assert rows["Llama 3.1 70B Instruct"]["Parameters (B)"] == "70.55"
    assert rows["Qwen2.5 7B Instruct"]["Parameters (B)"] == "7.62"
    assert rows["Llama 3.1 8B Instruct"]["USD / 1M output tokens"] == EXPECTED["llama8"]["steady"]
    assert b"size-cost-chart" in response.content and b"chart.umd.min.js" in response.content


def test_it_reports_spend_by_month_and_experiment_against_budgets(history, alice, web):
    from datetime import date
    from decimal import Decimal

    from runs.services.budgets import budget_set

    from .conftest import SYSTEM

    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal("100"))
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal("1.50"), month=date(2025, 1, 1))
    budget_set(org=alice.org, actor=SYSTEM, limit_usd=Decimal("10"), experiment=history.small)
    tables = page_tables(web.get("/o/acme/reports/spend/"))
    months = as_dicts(tables["months"])
    assert [(m["Month"], m["Spend USD"]) for m in months] == list(EXPECTED["spend"].items())
    january = months[1]
    # 1.8688 spent against January's own 1.50 budget: 0.3688 over, 124.6 % used.
    assert (january["Budget USD"], january["Budget"]) == ("1.50", "month")
    assert january["Remaining USD"] == "-0.3688" and january["Used %"] == "124.6"
    february = months[0]
    assert (february["Budget USD"], february["Budget"]) == ("100.00", "standing")
    assert february["Remaining USD"] == "98.0000" and february["Used %"] == "2.0"
    experiments = {e["Experiment"]: e for e in as_dicts(tables["experiments"])}
    assert experiments["llama-8b-batching"]["Spend USD"] == "1.3688"
    assert experiments["llama-8b-batching"]["Remaining USD"] == "8.6312"
    assert experiments["llama-8b-simulated"]["Engine"] == "simulated"


def test_it_recommends_a_config_and_model_with_reasons_and_runners_up(history, web):
    response = web.get(f"/o/acme/reports/choice/{history.small.id}/")
    assert response.status_code == 200
    tables = page_tables(response)
    (best,) = as_dicts(tables["recommended"])
    assert best["Model"] == "Llama 3.1 8B Instruct" and best["Config"] == "max_num_seqs=128"
    assert best["USD / 1M output tokens"] == EXPECTED["llama8"]["steady"]
    # 400 ms against 500 ms: 20.0 % headroom.
    assert best["Headroom under SLOs"] == "TTFT 20.0%"
    assert best["Levels meeting SLOs"] == "concurrency=8, concurrency=64"
    runners = as_dicts(tables["runners-up"])
    # The other experiments share the workload and SLOs, so other models compete.
    assert [(r["Rank"], r["Model"], r["USD / 1M output tokens"]) for r in runners] == [
        ("2", "Llama 3.1 8B Instruct", EXPECTED["llama8_64"]["steady"]),
        ("3", "Qwen2.5 7B Instruct", EXPECTED["qwen7"]["steady"]),
        ("4", "Llama 3.1 70B Instruct", EXPECTED["llama70"]["steady"]),
    ]
    assert len(as_dicts(tables["simulated"])) == 1
    text = response.content.decode()
    # (0.2639 − 0.2217) / 0.2639 = 16.0 % cheaper than the runner-up.
    assert "16.0% cheaper per token than the runner-up" in text
    assert f"/o/acme/promotions/propose/{history.t128.run_id}/1/" in text


def test_it_recommends_by_the_cost_at_capacity_with_each_model_s_best(history, web):
    searched(history.t64, 96, 8000.0)  # 0.1385 at capacity
    path = f"/o/acme/reports/choice/{history.small.id}/"
    response = web.get(path)
    tables = page_tables(response)
    (best,) = as_dicts(tables["recommended"])
    assert (best["Config"], best["USD / 1M at capacity"]) == ("max_num_seqs=64", "0.1385")
    assert best["Capacity at SLOs"] == "concurrency 96 (96–104)"
    assert best["USD / 1M output tokens"] == EXPECTED["llama8_64"]["steady"]
    assert best["Ranked by"] == "capacity"
    runners = as_dicts(tables["runners-up"])
    assert [(r["Config"], r["Ranked by"]) for r in runners][:1] == [
        ("max_num_seqs=128", "best fixed level")
    ]
    # Per model, its best configuration: capacity and cost there beside the old figures.
    per_model = as_dicts(tables["per-model"])
    assert [
        (r["Model"], r["USD / 1M at capacity"], r["Capacity at SLOs"], r["USD / 1M output tokens"])
        for r in per_model
    ] == [
        ("Llama 3.1 8B Instruct", "0.1385", "concurrency 96 (96–104)", "0.2639"),
        ("Qwen2.5 7B Instruct", "", "", EXPECTED["qwen7"]["steady"]),
        ("Llama 3.1 70B Instruct", "", "", EXPECTED["llama70"]["steady"]),
    ]
    text = response.content.decode()
    assert "Capacity at the SLOs" in text and "<strong>0.1385</strong>" in text
    # A capacity against a fixed level is no saving to quote.
    assert "cheaper per token than the runner-up" not in text
    assert f"/o/acme/promotions/propose/{history.t64.run_id}/0/" in text
    assert csv_rows(web.get(path, {"csv": "per-model"})) == tables["per-model"]
    # Both at capacity: (0.1847 − 0.1385) / 0.1847 = 25.0 % cheaper.
    searched(history.t128, 96, 6000.0)
    assert "25.0% cheaper per token than the runner-up" in web.get(path).content.decode()


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("/o/acme/reports/costs/", "measured"),
        ("/o/acme/reports/costs/", "simulated"),
        ("/o/acme/reports/models/", "measured"),
        ("/o/acme/reports/spend/", "months"),
        ("/o/acme/reports/spend/", "experiments"),
        ("choice", "recommended"),
        ("choice", "runners-up"),
        ("choice", "simulated"),
    ],
)
def test_it_exports_csv_equal_to_the_page(history, web, path, key):
    if path == "choice":
        path = f"/o/acme/reports/choice/{history.small.id}/"
    page = page_tables(web.get(path))[key]
    exported = csv_rows(web.get(path, {"csv": key}))
    assert exported == page
    assert len(exported) > 1


def test_it_answers_404_for_an_unknown_csv_table(history, web):
    assert web.get("/o/acme/reports/costs/", {"csv": "nope"}).status_code == 404


def test_it_shows_empty_reports_for_a_new_organization(charlie):
    client = signed_in(charlie)
    for path in [*REPORTS, "promotions", "audit"]:
        assert client.get(f"/o/globex/{path}/").status_code == 200, path


def test_it_says_what_would_fill_each_empty_table_of_the_model_choice(charlie):
    # The demo's manager saw four bare "None." sections: each empty table says what it lists.
    experiment = make_experiment(charlie.org, engine="sim")
    page = signed_in(charlie).get(f"/o/globex/reports/choice/{experiment.id}/")
    empties = re.findall(r'<p class="empty">([^<]*)</p>', page.content.decode())
    assert len(empties) >= 5
    assert all(len(text.split()) > 5 for text in empties), empties
    assert any("make demo ENGINE=vllm" in unescape(text) for text in empties), empties


# --- Access ---------------------------------------------------------------------------------


def _paths(history, promotion):
    return [f"/o/acme/{p}/" for p in [*REPORTS, "promotions", "audit"]] + [
        f"/o/acme/reports/choice/{history.small.id}/",
        "/o/acme/reports/costs/?csv=measured",
        "/o/acme/audit/?format=csv",
        f"/o/acme/promotions/{promotion.id}/",
        f"/o/acme/promotions/propose/{history.t128.run_id}/1/",
    ]


@pytest.fixture
def promotion(history, mallory):
    from runs.services.promotions import promotion_propose

    from .test_promotions import actor, member

    return promotion_propose(
        membership=member(mallory), actor=actor(mallory), trial=history.t128, note="cheapest"
    )


def test_it_hides_other_tenants_reports_promotions_and_audit(history, promotion, charlie):
    client = signed_in(charlie)
    for path in _paths(history, promotion):
        response = client.get(path)
        assert response.status_code == 404, path
        assert b"Llama" not in response.content
    for action in ("approve", "reject"):
        response = client.post(f"/o/acme/promotions/{promotion.id}/{action}/", {"comment": "x"})
        assert response.status_code == 404
    assert client.post(f"/o/acme/promotions/propose/{history.t64.run_id}/0/").status_code == 404
    # Globex's own pages never show acme's rows either.
    assert b"llama-8b" not in client.get("/o/globex/reports/spend/").content
    assert Promotion.objects.get().state == PromotionState.PROPOSED


def test_it_sends_anonymous_visitors_to_sign_in(history, promotion):
    client = Client()
    for path in _paths(history, promotion):
        response = client.get(path)
        assert response.status_code == 302 and response.url.startswith("/login/"), path


@pytest.mark.slow
def test_it_lets_a_viewer_read_but_not_propose(history, promotion, bob):
    client = signed_in(bob)
    for path in _paths(history, promotion)[:-1]:
        assert client.get(path).status_code == 200, path
    propose_page = f"/o/acme/promotions/propose/{history.t64.run_id}/0/"
    assert client.get(propose_page).status_code == 403
    assert client.post(propose_page, {"note": "x"}).status_code == 403
    assert Promotion.objects.count() == 1


def test_it_refuses_a_member_deciding_and_the_proposer_approving(history, promotion, mallory):
    client = signed_in(mallory)
    page = client.get(f"/o/acme/promotions/{promotion.id}/")
    assert b"another owner or admin must approve" in page.content
    assert b">Approve<" not in page.content
    assert client.post(f"/o/acme/promotions/{promotion.id}/approve/").status_code == 403
    assert Promotion.objects.get().state == PromotionState.PROPOSED


def test_it_refuses_an_admin_approving_their_own_proposal(history, alice, web):
    response = web.post(f"/o/acme/promotions/propose/{history.t128.run_id}/1/", {"note": "mine"})
    promotion = Promotion.objects.get()
    assert response.status_code == 302
    page = web.get(f"/o/acme/promotions/{promotion.id}/")
    assert b">Approve<" not in page.content
    assert web.post(f"/o/acme/promotions/{promotion.id}/approve/").status_code == 403
    assert Promotion.objects.get().state == PromotionState.PROPOSED


# --- Promotion pages ------------------------------------------------------------------------


def test_it_proposes_approves_and_shows_the_recipe(history, mallory, alice, web):
    proposer = signed_in(mallory)
    form = proposer.get(f"/o/acme/promotions/propose/{history.t128.run_id}/1/")
    assert form.status_code == 200 and b"max_num_seqs=128" in form.content
    response = proposer.post(
        f"/o/acme/promotions/propose/{history.t128.run_id}/1/", {"note": "cheapest at SLOs"}
    )
    promotion = Promotion.objects.get()
    assert response.status_code == 302 and response.url == f"/o/acme/promotions/{promotion.id}/"
    review = web.get(response.url)
    assert b">Approve<" in review.content and b"cheapest at SLOs" in review.content
    decided = web.post(f"/o/acme/promotions/{promotion.id}/approve/", {"comment": "go"})
    assert decided.status_code == 302
    recipe = web.get(f"/o/acme/promotions/{promotion.id}/").content.decode()
    assert "Deployment recipe</h2>" in recipe
    assert (
        "vllm serve meta-llama/Llama-3.1-8B-Instruct --revision main --host 0.0.0.0 --port 8000 "
        "--served-model-name meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 128"
    ) in recipe
    assert "docker run --gpus all" in recipe and "vllm/vllm-openai:v0.11.0" in recipe
    assert "SECURE" in recipe and "80 GB" in recipe
    listing = web.get("/o/acme/promotions/").content.decode()
    assert "In production" in listing and "llama-8b-batching" in listing
    assert [
        e.event for e in AuditEvent.objects.filter(event__startswith="promotion.").order_by("seq")
    ] == [
        "promotion.propose",
        "promotion.approve",
    ]


def test_it_shows_form_errors_and_keeps_nothing(history, promotion, web):
    too_long = web.post(f"/o/acme/promotions/propose/{history.t64.run_id}/0/", {"note": "x" * 2001})
    assert too_long.status_code == 400 and b"At most 2000 characters" in too_long.content
    simulated = web.post(f"/o/acme/promotions/propose/{history.tsim.run_id}/0/", {"note": ""})
    assert simulated.status_code == 400 and b"simulator" in simulated.content
    no_reason = web.post(f"/o/acme/promotions/{promotion.id}/reject/", {"comment": ""})
    assert no_reason.status_code == 400 and b"Say why" in no_reason.content
    assert Promotion.objects.count() == 1
    assert Promotion.objects.get().state == PromotionState.PROPOSED
    again = web.post(f"/o/acme/promotions/propose/{history.t128.run_id}/1/", {"note": ""})
    assert again.status_code == 409 and b"already has an open proposal" in again.content


def test_it_answers_404_for_a_missing_trial_or_promotion(history, web):
    assert web.get(f"/o/acme/promotions/propose/{history.t128.run_id}/9/").status_code == 404
    missing = "00000000-0000-0000-0000-000000000000"
    assert web.get(f"/o/acme/promotions/{missing}/").status_code == 404


# --- Audit log viewer -------------------------------------------------------------------------


def test_it_filters_paginates_and_verifies_the_audit_log(history, promotion, web):
    page = web.get("/o/acme/audit/")
    text = page.content.decode()
    assert page.status_code == 200 and 'data-chain="verified"' in text
    total = AuditEvent.objects.filter(organization=promotion.organization).count()
    assert f"{total} events match" in text
    only = web.get("/o/acme/audit/", {"event": "promotion.propose"}).content.decode()
    assert "1 event matches" in only and "mallory@acme.example" in only
    noun = web.get("/o/acme/audit/", {"event": "experiment."}).content.decode()
    assert "4 events match" in noun
    by_actor = web.get("/o/acme/audit/", {"actor": "mallory"}).content.decode()
    assert "1 event matches" in by_actor and "<code>promotion.propose</code>" in by_actor
    by_target = web.get("/o/acme/audit/", {"target": "promotion"}).content.decode()
    assert "1 event matches" in by_target
    future = web.get("/o/acme/audit/", {"since": "2999-01-01"}).content.decode()
    assert "0 events match" in future
    bad = web.get("/o/acme/audit/", {"since": "yesterday"})
    assert bad.status_code == 400 and b"YYYY-MM-DD" in bad.content


def test_it_pages_through_the_audit_log(history, web, monkeypatch):
    from frontend.audit import views as audit_views

    monkeypatch.setattr(audit_views, "AUDIT_PAGE_SIZE", 5)
    first = web.get("/o/acme/audit/").content.decode()
    assert "Page 1 of" in first and 'rel="next"' in first
    second = web.get("/o/acme/audit/", {"page": 2}).content.decode()
    assert "Page 2 of" in second and 'rel="prev"' in second


def test_it_exports_the_filtered_audit_log_as_csv(history, promotion, web):
    response = web.get("/o/acme/audit/", {"event": "experiment.", "format": "csv"})
    rows = as_dicts(csv_rows(response))
    assert [r["event"] for r in rows] == ["experiment.create"] * 4
    assert [int(r["seq"]) for r in rows] == sorted(int(r["seq"]) for r in rows)
    assert rows[0]["hash"] and rows[0]["prev_hash"]


def test_it_shows_where_the_audit_chain_breaks(history, promotion, web):
    victim = AuditEvent.objects.get(event="promotion.propose")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_auditevent SET actor_label = %s WHERE id = %s", ["eve", victim.id]
        )
    text = web.get("/o/acme/audit/").content.decode()
    assert 'data-chain="broken"' in text and f"Chain broken at #{victim.seq}" in text


def test_it_hides_another_tenants_audit_events(history, charlie):
    client = signed_in(charlie)
    text = client.get("/o/globex/audit/").content.decode()
    assert "acme" not in text and "llama-8b" not in text
    rows = as_dicts(csv_rows(client.get("/o/globex/audit/", {"format": "csv"})))
    assert rows and all("acme" not in r["target_repr"] for r in rows)


def test_it_lets_a_new_admin_see_the_log(history, org_a):
    admin = _person("dana@acme.example", org_a, "admin")
    assert signed_in(admin).get("/o/acme/audit/").status_code == 200


def test_it_cuts_the_model_choices_tail_and_says_so(history, web, monkeypatch):
    from frontend.reports import views as report_views

    from .report_data import add_trial, level

    # Two more simulated trials, dearer than the first (less throughput at the same price).
    for index, tput in ((1, 8000.0), (2, 7000.0)):
        config = {"max_num_seqs": 32 * index}
        add_trial(history.tsim.run, index, config, [level(64, tput, 100.0, simulated={"x": 1})])
    monkeypatch.setattr(report_views, "CHOICE_TAIL_ROWS", 2)
    path = f"/o/acme/reports/choice/{history.small.id}/"
    response = web.get(path)
    shown = as_dicts(page_tables(response)["simulated"])
    assert [row["Config"] for row in shown] == ["max_num_seqs=64", "max_num_seqs=32"]
    assert "The 2 cheapest of 3 trials (the CSV holds the same rows)" in response.content.decode()
    assert as_dicts(csv_rows(web.get(path, {"csv": "simulated"}))) == shown
    # The recommendation and the runners-up are never cut.
    assert len(as_dicts(page_tables(response)["recommended"])) == 1


def _json_script(html: str, element_id: str):
    found = re.search(rf'<script id="{element_id}" type="application/json">(.*?)</script>', html)
    return json.loads(found[1]) if found else None


def test_it_charts_capacity_against_cost_with_simulated_points_apart(history, web):
    searched(history.t128, 96, 6000.0)
    searched(history.tsim, 64, 9000.0)
    html = web.get(f"/o/acme/reports/choice/{history.small.id}/").content.decode()
    points = _json_script(html, "capacity-chart-data")
    assert {(p["capacity"], p["simulated"]) for p in points} == {(96, False), (64, True)}
    # The figure is the table's: 3.99 / 3600 / 6000 × 1e6 = 0.1847.
    assert {p["usd_per_million"] for p in points if not p["simulated"]} == {"0.1847"}
    assert 'id="capacity-cost-chart"' in html


def test_it_charts_simulated_models_labelled_when_none_is_measured(charlie):
    experiment = make_experiment(charlie.org, engine="sim")
    run = add_run(experiment, created_at=datetime(2025, 2, 5, tzinfo=UTC))
    add_trial(run, 0, {}, [level(64, 9000.0, 100.0, simulated={"speed": 1.0})])
    html = signed_in(charlie).get("/o/globex/reports/models/").content.decode()
    assert [p["simulated"] for p in _json_script(html, "model-chart-data")] == [True]
    assert 'id="model-chart-simulated"' in html
