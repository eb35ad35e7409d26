"""Quality in the report tables and charts (issue 38, docs/quality.md): a configuration's
score on its run's evaluation beside its cost, and the models report's quality against cost.

Guarantee: a chart's points are the rows of its table (``quality_table`` and
``quality_chart_data`` read the same ``QualityPoint`` list, texts as the table's); a
configuration without a score is never charted, and its row says why (``quality not judged:
simulated``, ``… not scored yet``).
"""

from __future__ import annotations

from frontend.reports.tables import (
    IMAGE,
    RANKED_BY,
    Cell,
    ReportTable,
    RunHref,
    billions,
    config_text,
    gpus_text,
    num,
    run_cell,
    simulated_first,
)
from runs.selectors.cost_rankings import QualityPoint
from runs.selectors.report_quality import FigureQuality

QUALITY, QUALITY_FLOOR = "Quality (95 % CI)", "Quality floor"
COST_AT_SLOS = "USD / 1M at the SLOs"


def quality_cells(quality: FigureQuality | None) -> list[Cell]:
    """The quality columns of a row (``QUALITY``, ``QUALITY_FLOOR``): empty where the run
    has no evaluation or no floor."""
    if quality is None:
        return [Cell(""), Cell("")]
    return [Cell(quality.score_text(), wrap=True), Cell(quality.floor_text, wrap=True)]


QUALITY_COLUMNS = [
    "Evaluation",
    "Model",
    "Parameters (B)",
    COST_AT_SLOS,
    RANKED_BY,
    "Score %",
    "95 % CI low %",
    "95 % CI high %",
    "Items scored",
    "Quality",
    "GPUs",
    IMAGE,
    "Config",
    "Run · trial",
]


def _percent(value: float | None) -> str:
    return "" if value is None else f"{value * 100:.1f}"


def quality_table(
    key: str, title: str, points: list[QualityPoint], *, simulated: bool, run_href: RunHref
) -> ReportTable:
    """Each model's cheapest configuration per evaluation: its cost at the SLOs and its
    score with the interval (module docstring)."""
    table = ReportTable(
        key=key,
        title=title,
        columns=list(QUALITY_COLUMNS),
        simulated=simulated,
        folded=frozenset({"95 % CI low %", "95 % CI high %", "GPUs", IMAGE, "Config"}),
    )
    for point in points:
        f, q = point.figure, point.quality
        row = [
            Cell(q.evaluation),
            Cell(f.model.name),
            num(billions(f.model.parameter_count)),
            num(f.ranking_usd_per_million),
            Cell(f.ranked_by),
            num(_percent(q.score)),
            num(_percent(q.low)),
            num(_percent(q.high)),
            num(q.scored if q.judged else None),
            Cell(q.floor_text or ("" if q.judged else q.note), wrap=True),
            Cell(gpus_text(f)),
            Cell(f.image_tag),
            Cell(config_text(f.serve_config), wrap=True),
            run_cell(f, run_href),
        ]
        table.rows.append(row)
    table.rows = simulated_first(table, table.rows)
    return table


def quality_chart_data(table: ReportTable) -> list[dict]:
    """The chart's points: the judged rows of ``table``, as its texts (module docstring)."""
    return [
        {
            "evaluation": table.column(row, "Evaluation"),
            "label": f"{table.column(row, 'Model')} ({table.column(row, 'Parameters (B)')} B) · "
            f"{table.column(row, 'Config')}",
            "usd_per_million": table.column(row, COST_AT_SLOS),
            "score_pct": table.column(row, "Score %"),
            "low_pct": table.column(row, "95 % CI low %"),
            "high_pct": table.column(row, "95 % CI high %"),
        }
        for row in table.rows
        if table.column(row, "Score %") and table.column(row, COST_AT_SLOS)
    ]
