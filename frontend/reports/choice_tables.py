"""The model choice's tables (``frontend.reports.tables`` says what every report table
guarantees): each candidate's cost at the SLOs, its SLO figures and, where its run has an
evaluation, its quality and its standing against its run's quality floor."""

from __future__ import annotations

from collections.abc import Callable

from frontend.reports.quality_tables import QUALITY, QUALITY_FLOOR, quality_cells
from frontend.reports.tables import (
    CAPACITY,
    CAPACITY_USD,
    IMAGE,
    RANKED_BY,
    Cell,
    ReportTable,
    RunHref,
    capacity_text,
    config_text,
    gpus_text,
    headroom_text,
    num,
    run_cell,
    simulated_first,
    text,
)
from runs.selectors.report_quality import FigureQuality
from runs.selectors.trial_figures import TrialFigure

CHOICE_COLUMNS = [
    "Rank",
    "Model",
    "Experiment",
    "GPUs",
    IMAGE,
    "Config",
    CAPACITY_USD,
    CAPACITY,
    "Load at SLOs",
    "USD / 1M output tokens",
    "USD / 1M, cold start amortized",
    "Headroom under SLOs",
    "Levels meeting SLOs",
    "Run · trial",
    RANKED_BY,
    QUALITY,
    QUALITY_FLOOR,
]
CHOICE_FOLDED = frozenset(
    {
        "GPUs",
        "Load at SLOs",
        "USD / 1M output tokens",
        "USD / 1M, cold start amortized",
        "Headroom under SLOs",
        "Levels meeting SLOs",
        RANKED_BY,
        QUALITY,
        QUALITY_FLOOR,
    }
)


def choice_table(
    key: str,
    title: str,
    figures: list[TrialFigure],
    *,
    run_href: RunHref,
    first_rank: int = 1,
    simulated: bool = False,
    empty: str = "Nothing to show yet.",
    quality: Callable[[TrialFigure], FigureQuality | None] = lambda figure: None,
) -> ReportTable:
    table = ReportTable(
        key=key,
        title=title,
        columns=list(CHOICE_COLUMNS),
        simulated=simulated,
        empty=empty,
        folded=CHOICE_FOLDED,
    )
    rows = []
    for rank, f in enumerate(figures, start=first_rank):
        rows.append(
            [
                num(rank),
                Cell(f.model.name),
                Cell(f.experiment.name),
                Cell(gpus_text(f)),
                Cell(f.image_tag),
                Cell(config_text(f.serve_config), wrap=True),
                num(f.usd_per_million_at_capacity),
                Cell(capacity_text(f.capacity)),
                Cell(f.cost.load or ""),
                num(f.usd_per_million),
                num(f.cost.usd_per_million_output_tokens_cold_start_amortized),
                Cell(headroom_text(f), wrap=True),
                Cell(", ".join(f.qualifying_loads()), wrap=True),
                run_cell(f, run_href),
                Cell(f.ranked_by),
                *quality_cells(quality(f)),
            ]
        )
    table.rows = simulated_first(table, rows)
    return table


def capacity_chart_data(figures: list[TrialFigure]) -> list[dict]:
    """The model choice's chart: each configuration with a capacity at the SLOs, that
    capacity against its cost per 1M output tokens there (as the table's texts), simulated
    ones marked so that they are drawn apart."""
    return [
        {
            "label": f"{f.model.name} · {config_text(f.serve_config)} · run "
            f"{str(f.run_id)[:8]} #{f.trial_index}",
            "axis": (f.capacity or {}).get("axis") or "concurrency",
            "capacity": (f.capacity or {}).get("capacity"),
            "usd_per_million": text(f.usd_per_million_at_capacity),
            "simulated": f.simulated,
        }
        for f in figures
        if f.usd_per_million_at_capacity is not None
    ]
