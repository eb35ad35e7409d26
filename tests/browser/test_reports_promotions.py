"""Managers' pages in a real browser: a member proposes a trial, an owner approves it and
sees the recipe; the cost and model-size reports draw their charts without console errors."""

from __future__ import annotations

from playwright.sync_api import expect

from runs.models import AuditEvent, Promotion, PromotionState
from tests.site.report_data import EXPECTED, build_history


def test_it_proposes_and_approves_a_promotion_as_two_people(
    page, sign_in, screenshot, alice, mallory
):
    history = build_history(alice.org)
    sign_in(page, mallory)
    page.goto(f"/o/acme/reports/choice/{history.small.id}/")
    expect(page.get_by_role("heading", name="Recommendation")).to_be_visible()
    screenshot(page, "report-model-choice")
    page.get_by_role("link", name="Propose for production").click()
    page.get_by_label("Note for the approver").fill("Cheapest config meeting the TTFT SLO.")
    page.get_by_role("button", name="Propose").click()
    expect(page.get_by_text("another owner or admin must approve")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    page.get_by_role("button", name="Sign out").click()

    sign_in(page, alice)
    page.goto("/o/acme/promotions/")
    expect(page.get_by_role("heading", name="Waiting for a decision")).to_be_visible()
    page.get_by_role("link", name="Review for llama-8b-batching trial #1").click()
    page.get_by_label("Comment").fill("Approved for the March rollout.")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("heading", name="Deployment recipe")).to_be_visible()
    expect(page.locator("#serve-command")).to_contain_text(
        "vllm serve meta-llama/Llama-3.1-8B-Instruct"
    )
    expect(page.locator("#serve-command")).to_contain_text("--max-num-seqs 128")
    expect(page.locator("#docker-command")).to_contain_text("vllm/vllm-openai:v0.11.0")
    screenshot(page, "promotion-recipe")

    promotion = Promotion.objects.get()
    assert promotion.state == PromotionState.APPROVED
    assert promotion.proposed_by == mallory.user and promotion.decided_by == alice.user
    assert list(
        AuditEvent.objects.filter(event__startswith="promotion.")
        .order_by("seq")
        .values_list("event", "actor_label")
    ) == [
        ("promotion.propose", "mallory@acme.example"),
        ("promotion.approve", "alice@acme.example"),
    ]


def _chart_drawn(page, canvas_id: str) -> bool:
    # Chart.js keeps an instance per canvas it drew on.
    return page.evaluate(f"() => !!Chart.getChart(document.getElementById('{canvas_id}'))")


def test_it_draws_the_cost_and_model_size_reports(page, sign_in, screenshot, alice):
    build_history(alice.org)
    sign_in(page, alice)
    page.goto("/o/acme/reports/costs/")
    table = page.locator('table[data-table="measured"]')
    expect(table).to_contain_text(EXPECTED["llama8"]["steady"])
    expect(page.locator('table[data-table="simulated"] .badge-simulated')).to_have_count(1)
    page.wait_for_function(
        "() => window.Chart && Chart.getChart(document.getElementById('cost-chart'))"
    )
    assert _chart_drawn(page, "cost-chart")
    screenshot(page, "report-costs")
    page.emulate_media(media="print")
    screenshot(page, "report-costs-print")
    page.emulate_media(media="screen")

    page.goto("/o/acme/reports/models/")
    page.wait_for_function(
        "() => window.Chart && Chart.getChart(document.getElementById('size-cost-chart'))"
    )
    assert _chart_drawn(page, "size-throughput-chart")
    expect(page.locator('table[data-table="measured"]')).to_contain_text("yes")
    screenshot(page, "report-model-size")

    page.goto("/o/acme/reports/spend/")
    page.wait_for_function(
        "() => window.Chart && Chart.getChart(document.getElementById('spend-chart'))"
    )
    screenshot(page, "report-spend")
    page.goto("/o/acme/audit/")
    expect(page.get_by_text("Chain verified")).to_be_visible()
    screenshot(page, "audit-log")


def test_it_fits_the_cost_report_on_a_phone(page, sign_in, screenshot, alice):
    build_history(alice.org)
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, alice)
    page.goto("/o/acme/reports/costs/")
    # The page itself never scrolls sideways; wide tables scroll inside their own box.
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    screenshot(page, "report-costs-phone")


def test_it_charts_quality_against_cost_per_evaluation(page, sign_in, alice):
    from tests.site.test_quality_reports import _two_models

    _two_models(alice.org)
    sign_in(page, alice)
    page.goto("/o/acme/reports/models/")
    page.wait_for_function(
        "() => window.Chart && Chart.getChart(document.getElementById('quality-cost-chart'))"
    )
    # One series (the pack), one point per model: Llama's trial 1 is excluded for quality.
    series = page.evaluate(
        "() => Chart.getChart(document.getElementById('quality-cost-chart')).data.datasets"
        ".map(d => [d.label, d.data.map(p => [p.x, p.y])])"
    )
    assert series == [["pack arithmetic", [[1, 80], [0.25, 90]]]]
    expect(page.locator("#quality-cost .excluded-for-quality")).to_contain_text(
        "score 60.0 % is below the floor of 70.0 %"
    )
