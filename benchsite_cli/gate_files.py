"""The gate's result as files CI systems read: JUnit XML and a Markdown summary.

Guarantees: the JUnit file is built with ``xml.etree`` (well-formed whatever the config's
text), one ``<testcase>`` per configuration × metric whose ``<failure>`` lists every level
that regressed, and a case that compared nothing (``n/a`` at every level, e.g. cost on the
local provider) is ``<skipped>`` with the reason; the Markdown is one table with every ``|`` in
a cell escaped (with the terminal's columns: an Image column first when a row names the images
it compared), followed by what was not compared. Every row says its change in words with
its interval (``p99_ttft_ms worse by 12 % (CI 8–16 %)``, ``within noise (CI −3–+4 %)``, or
"no interval"), and a failure says whether the whole interval lay beyond the threshold.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchsite_cli.gate import (
    GateResult,
    Row,
    format_value,
    result_columns,
    row_cells,
    shows_images,
)


def _cases(result: GateResult) -> dict[tuple[str, str], list[Row]]:
    cases: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for row in result.rows:
        cases[(row.config, row.metric)].append(row)
    return cases


def _row_text(row: Row) -> str:
    return (
        f"{row.level}: {row.metric} {row.change_text}: {format_value(row.baseline)} → "
        f"{format_value(row.new)}, limit {row.limit_text}, {row.verdict_text}"
    )


def junit_write(result: GateResult, path: Path, *, run: dict[str, Any]) -> None:
    cases = _cases(result)
    failures = sum(any(row.failed for row in rows) for rows in cases.values())
    skipped = sum(all(row.verdict == "n/a" for row in rows) for rows in cases.values())
    suites = ET.Element("testsuites", name="benchsite")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=f"benchsite gate: run {result.new_run} vs {result.baseline_kind}",
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("run", result.new_run),
        ("baseline_run", result.baseline_run),
        ("baseline", result.baseline_kind),
        ("experiment", str(run.get("experiment", ""))),
        ("reason", str(run.get("reason", ""))),
    ):
        ET.SubElement(properties, "property", name=name, value=value)
    for (config, metric), rows in cases.items():
        case = ET.SubElement(suite, "testcase", classname=config, name=metric, time="0")
        failed = [row for row in rows if row.failed]
        if failed:
            failure = ET.SubElement(
                case,
                "failure",
                type="regression",
                message=f"{metric} regressed beyond {rows[0].limit_text} at "
                + ", ".join(f"{row.level} ({row.change_text}: {row.why})" for row in failed),
            )
            failure.text = "\n".join(_row_text(row) for row in failed)
        elif all(row.verdict == "n/a" for row in rows):
            ET.SubElement(case, "skipped", message=f"{metric} {result.not_compared[metric]}")
        ET.SubElement(case, "system-out").text = "\n".join(_row_text(row) for row in rows)
    ET.indent(suites)
    ET.ElementTree(suites).write(path, encoding="utf-8", xml_declaration=True)


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


# How the Markdown table heads and aligns each column of ``result_columns`` (figures right).
_MARKDOWN_COLUMNS = {
    "image": ("Image", "---"),
    "config": ("Config", "---"),
    "level": ("Level", "---"),
    "metric": ("Metric", "---"),
    "baseline": ("Baseline", "---:"),
    "new": ("New", "---:"),
    "change": ("Change", "---:"),
    "limit": ("Limit", "---:"),
}


def markdown_write(result: GateResult, path: Path, *, run: dict[str, Any]) -> None:
    verdict = "❌ regression" if result.failed else "✅ within thresholds"
    images = shows_images(result)
    heads, aligns = zip(*(_MARKDOWN_COLUMNS[name] for name in result_columns(result)), strict=True)
    lines = [
        f"## Benchsite gate: {verdict}",
        "",
        f"- Run: `{result.new_run}` ({_cell(str(run.get('state', '')))})"
        + (f", reason: {_cell(str(run['reason']))}" if run.get("reason") else ""),
        f"- Baseline ({_cell(result.baseline_kind)}): `{result.baseline_run}`",
        f"- Regressions: {len(result.regressions())} of {len(result.rows)} comparisons",
        "",
        "| " + " | ".join((*heads, "Verdict")) + " |",
        "|" + "|".join((*aligns, "---")) + "|",
    ]
    for row in result.rows:
        mark = "**" if row.failed else ""
        lines.append(
            "| "
            + " | ".join(
                _cell(cell)
                for cell in (*row_cells(row, image=images), f"{mark}{row.verdict_text}{mark}")
            )
            + " |"
        )
    if result.not_compared:
        lines += ["", "Not compared:", ""]
        lines += [f"- `{metric}`: {_cell(why)}" for metric, why in result.not_compared.items()]
    if result.unmatched_configs:
        lines += ["", "Configurations without a baseline (not gated):", ""]
        lines += [f"- `{config}`" for config in result.unmatched_configs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
