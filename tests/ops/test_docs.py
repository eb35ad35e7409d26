"""The operator docs exist, are linked from the README, and link only to files that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["getting-started", "concepts", "api", "operating", "security"]


@pytest.mark.parametrize("name", DOCS)
def test_it_links_each_doc_from_the_readme(name):
    assert (ROOT / "docs" / f"{name}.md").is_file()
    assert f"(docs/{name}.md)" in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    "page", ["README.md", "docker/README.md", *(f"docs/{name}.md" for name in DOCS)]
)
def test_it_links_only_to_files_that_exist(page):
    path = ROOT / page
    for target in re.findall(r"\]\(([^)#]+)\)", path.read_text()):
        if target.startswith(("http://", "https://", "/")):
            continue
        assert (path.parent / target).exists(), f"{page} links to missing {target}"


def test_it_defines_every_metric_in_the_concepts():
    text = (ROOT / "docs" / "concepts.md").read_text()
    for term in ["TTFT", "ITL", "TPOT", "E2EL", "Goodput", "KV-cache usage", "Cold start"]:
        assert term in text, term
    assert "GuideLLM" in text  # how our names differ from other tools'
