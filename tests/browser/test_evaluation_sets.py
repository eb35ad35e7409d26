"""Evaluation sets in a real browser (issue 38): a bad file refused on the form naming the
line and field, a good one listed with its summary, named in the builder, and deleted once
no experiment names it."""

from __future__ import annotations

import json
import re

from playwright.sync_api import expect

from runs.models import EvaluationSet
from tests.site.conftest import make_model

SUMS = (
    json.dumps({"set": {"scorer": {"kind": "numeric"}, "licence": "CC0-1.0"}})
    + "\n"
    + json.dumps({"id": "a", "prompt": "2 + 2?", "reference": 4})
    + "\n"
).encode()
BAD = SUMS + b'{"id": "b", "prompt": "3 + 3?", "reference": "six"}\n'


def _upload(page, name: str, raw: bytes) -> None:
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("File").set_input_files(
        {"name": "set.jsonl", "mimeType": "application/jsonl", "buffer": raw}
    )
    page.get_by_role("button", name="Upload").click()


def test_a_set_is_refused_uploaded_offered_and_deleted(page, console, sign_in, alice, screenshot):
    console.allow(r"status of 400")  # Chromium logs the refused upload's answer itself
    make_model(alice.org)  # the builder needs one to show its form
    sign_in(page, alice)
    page.goto("/o/acme/experiments/")
    page.get_by_role("link", name="Evaluation sets").click()
    page.wait_for_url("**/o/acme/experiments/evaluation-sets/")

    _upload(page, "sums", BAD)
    expect(page.locator("#id_file-errors")).to_contain_text(
        "line 3: reference: the numeric scorer needs a number"
    )
    expect(page.locator("#id_file")).to_have_attribute("aria-invalid", "true")
    assert not EvaluationSet.objects.exists()
    screenshot(page, "evaluation-sets-refused")

    _upload(page, "sums", SUMS)
    expect(page.get_by_role("status")).to_contain_text("Uploaded sums: 1 item,")
    stored = EvaluationSet.objects.get()
    row = page.locator(f"#evaluation-set-{stored.id}")
    expect(row).to_contain_text("numeric 1")
    expect(row).to_contain_text("CC0-1.0")

    # The builder offers it beside the built-in pack.
    page.goto("/o/acme/experiments/new/")
    source = page.get_by_label("Evaluation set")
    expect(source.locator("option", has_text="sums (1 item)")).to_have_count(1)
    expect(source.locator("option", has_text="arithmetic (80 items)")).to_have_count(1)

    page.goto("/o/acme/experiments/evaluation-sets/")
    page.locator(f"#evaluation-set-{stored.id}").get_by_role(
        "button", name=re.compile("Delete")
    ).click()
    expect(page.get_by_role("status")).to_contain_text("Deleted sums.")
    assert not EvaluationSet.objects.exists()
