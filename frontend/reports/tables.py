"""The tables of the managers' reports, built once and rendered twice: as HTML and as CSV.

Guarantee: a report's page and its CSV export come from the same ``ReportTable``, so the CSV
holds exactly the figures the page shows (money as exact decimals to 0.0001 USD, measured
times and rates to 0.1), cell for cell. A missing figure is an empty cell in the CSV and a
dash on the page. A table with more columns than a page can hold shows the ones a reader
ranks by and folds the rest into each row's disclosure (``folded``): the page still holds
every cell, and the table fits its container at 1366 px and wider.
Simulated figures only ever sit in tables of their own (``simulated``).
Every row that stands for a trial names the vLLM image it ran on (``IMAGE``), beside its
serve configuration: one configuration measured on two images is two rows, told apart.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal

from django.http import HttpResponse

from agents import protocol
from runs.selectors.cold_starts import REPORT_SPANS, ColdStartGroup
from runs.selectors.cost_rankings import BestConfig, ModelPoint
from runs.selectors.spend import ExperimentSpend, MonthSpend
from runs.selectors.trial_figures import TrialFigure, tenth

SLO_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}
# The image tag a trial ran on (``Trial.image_tag``); empty for the simulator, which has none.
IMAGE = "Image"


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    href: str | None = None
    badge: bool = False  # shown as the simulated label
    numeric: bool = False
    wrap: bool = False  # long text (a serve config) may wrap; figures never do

    def __getitem__(self, name: str):
        # The template engine tries ``cell[name]`` before ``cell.name``: answering it spares
        # a caught exception per lookup, thousands of them on a long report.
        return getattr(self, name)


@dataclass(frozen=True, slots=True)
class PlacedCell:
    """One cell as the page places it: its column's position in the CSV and its heading."""

    index: int
    column: str
    cell: Cell


@dataclass(frozen=True, slots=True)
class PageRow:
    """One row of the page: the cells shown as columns, and those folded into its disclosure."""

    shown: list[PlacedCell]
    folded: list[PlacedCell]


@dataclass
class ReportTable:
    key: str
    title: str
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    simulated: bool = False
    empty: str = "Nothing to show yet."
    note: str = ""
    # Headings of the columns the page folds into each row's "More" disclosure.
    folded: frozenset[str] = frozenset()

    def column(self, row: list[Cell], name: str) -> str:
        """The text of ``row``'s cell in the column headed ``name``."""
        return row[self.columns.index(name)].text

    def shown_columns(self) -> list[PlacedCell]:
        """The headings shown as columns, each with its first row's cell (for alignment)."""
        first = self.rows[0] if self.rows else []
        return [
            PlacedCell(i, name, first[i] if i < len(first) else Cell(""))
            for i, name in enumerate(self.columns)
            if name not in self.folded
        ]

    def page_rows(self) -> list[PageRow]:
        """Every row, its cells split between the columns and the disclosure."""
        placed = []
        for row in self.rows:
            cells = [PlacedCell(i, self.columns[i], cell) for i, cell in enumerate(row)]
            placed.append(
                PageRow(
                    shown=[c for c in cells if c.column not in self.folded],
                    folded=[c for c in cells if c.column in self.folded],
                )
            )
        return placed


def text(value) -> str:
    """The one way a figure becomes text, on the page and in the CSV alike."""
    if value is None:
        return ""
    if isinstance(value, Decimal):
        return format(value, "f")
    return str(value)


def billions(count: int | None) -> Decimal | None:
    """A parameter count in billions to 0.01 (70553706496 → 70.55): readable on the page and
    still a number in the CSV."""
    if count is None:
        return None
    return (Decimal(count) / 10**9).quantize(Decimal("0.01"))


def num(value) -> Cell:
    return Cell(text(value), numeric=True)


def config_text(serve_config: dict) -> str:
    if not serve_config:
        return "vLLM defaults"
    return ", ".join(f"{name}={value}" for name, value in serve_config.items())


def slos_text(slos: dict) -> str:
    parts = [
        f"{label} ≤ {format(Decimal(str(slos[f'{metric}_ms'])).normalize(), 'f')} ms"
        for metric, label in SLO_LABELS.items()
        if slos.get(f"{metric}_ms") is not None
    ]
    return ", ".join(parts) or "none"


def gpus_text(figure: TrialFigure) -> str:
    return f"{figure.gpu_count}× {figure.gpu_type_id}"


def headroom_text(figure: TrialFigure) -> str:
    return ", ".join(
        f"{SLO_LABELS[metric]} {text(value) if value is not None else '?'}%"
        for metric, value in figure.headroom_pct().items()
    )


RunHref = Callable[[TrialFigure], str | None]


def run_cell(figure: TrialFigure, run_href: RunHref) -> Cell:
    return Cell(f"{str(figure.run_id)[:8]} #{figure.trial_index}", href=run_href(figure))


def simulated_first(table: ReportTable, rows: list[list[Cell]]) -> list[list[Cell]]:
    if not table.simulated:
        return rows
    table.columns.insert(0, "Source")
    return [[Cell("simulated", badge=True), *row] for row in rows]


# --- Cost per 1M output tokens -------------------------------------------------------------

# The capacity answer leads (where the trial's capacity search found one); the figures of the
# best fixed load level follow under their old names, so a CSV read before keeps reading.
CAPACITY_USD, CAPACITY = "USD / 1M at capacity", "Capacity at SLOs"
# What a row was ranked by (``TrialFigure.ranked_by``): its cost at capacity, or, without a
# capacity, its best fixed level's.
RANKED_BY = "Ranked by"
RANKING_NOTE = (
    "Ranked by the cost per 1M output tokens at capacity (the highest load meeting every SLO "
    "that the trial's capacity search found); trials without a capacity follow, ranked by the "
    "cost of their best fixed load level, as the Ranked by column says. Every cost counts "
    "only the GPUs the configuration uses (tensor × pipeline × data parallel sizes) at the "
    "pod's rate per GPU, as the Priced for column says."
)
COST_COLUMNS = [
    "Model",
    "GPUs",
    CAPACITY_USD,
    CAPACITY,
    "USD / 1M output tokens",
    "USD / 1M, cold start amortized",
    IMAGE,
    "Best config",
    "Load at SLOs",
    "Output tok/s",
    "Pod USD/h",
    "Priced for",
    "SLOs",
    "Experiment",
    "Run · trial",
    "Parameters (B)",
    RANKED_BY,
    "Trials priced / compared",
]


# What a manager ranks and picks by stays in columns; the rest opens per row.
COST_FOLDED = frozenset(
    {
        "USD / 1M, cold start amortized",
        "Load at SLOs",
        "Output tok/s",
        "Pod USD/h",
        "Priced for",
        "SLOs",
        "Parameters (B)",
        RANKED_BY,
        "Trials priced / compared",
    }
)


def capacity_text(capacity: dict | None) -> str:
    """``concurrency 31 (31–32)``: what a capacity search found and its bracket ("" if none)."""
    if not capacity or capacity.get("capacity") is None:
        return ""
    axis = "request rate" if capacity.get("axis") == "request_rate" else "concurrency"
    low, high = capacity.get("bracket_low"), capacity.get("bracket_high")
    bracket = f"{low:g}–{high:g}" if low is not None and high is not None else "no fail above"
    return f"{axis} {capacity['capacity']:g} ({bracket})"


def cost_table(
    key: str,
    title: str,
    bests: list[BestConfig],
    *,
    simulated: bool,
    run_href: RunHref,
) -> ReportTable:
    table = ReportTable(
        key=key,
        title=title,
        columns=list(COST_COLUMNS),
        simulated=simulated,
        folded=COST_FOLDED,
    )
    table.note = (
        f"{RANKING_NOTE} The other figures (USD / 1M output tokens, Load at SLOs, Output "
        "tok/s) are those of the best fixed load level."
    )
    rows = []
    for best in bests:
        f = best.best
        rows.append(
            [
                Cell(f.model.name),
                Cell(gpus_text(f)),
                num(f.usd_per_million_at_capacity),
                Cell(capacity_text(f.capacity)),
                num(f.usd_per_million),
                num(f.cost.usd_per_million_output_tokens_cold_start_amortized),
                Cell(f.image_tag),
                Cell(config_text(f.serve_config), wrap=True),
                Cell(f.cost.load or ""),
                num(_tput(f)),
                num(f.cost.pod_usd_per_hr),
                Cell(f.cost.priced_for),
                Cell(slos_text(f.slos)),
                Cell(f.experiment.name),
                run_cell(f, run_href),
                num(billions(f.model.parameter_count)),
                Cell(f.ranked_by),
                num(f"{best.trials_priced} / {best.trials_compared}"),
            ]
        )
    table.rows = simulated_first(table, rows)
    return table


def _tput(figure: TrialFigure):
    return tenth(figure.cost.output_throughput_tok_s)


# --- Model size ------------------------------------------------------------------------------

MODEL_COLUMNS = [
    "Model",
    "Parameters (B)",
    "USD / 1M output tokens",
    CAPACITY_USD,
    CAPACITY,
    "GPUs",
    IMAGE,
    "Best config",
    "Load at SLOs",
    "Output tok/s per GPU",
    "p99 TTFT ms",
    "p99 TPOT ms",
    "p99 ITL ms",
    "Pareto front",
    RANKED_BY,
]


MODEL_FOLDED = frozenset(
    {
        "USD / 1M output tokens",
        "Load at SLOs",
        "p99 TTFT ms",
        "p99 TPOT ms",
        "p99 ITL ms",
        RANKED_BY,
    }
)


def model_table(key: str, title: str, points: list[ModelPoint], *, simulated: bool) -> ReportTable:
    table = ReportTable(
        key=key,
        title=title,
        columns=list(MODEL_COLUMNS),
        simulated=simulated,
        folded=MODEL_FOLDED,
    )
    table.note = (
        f"{RANKING_NOTE} The Pareto front weighs each model's size against that cost. The other "
        "figures (USD / 1M output tokens, Load at SLOs, throughput, latencies) are those of the "
        "best fixed load level."
    )
    rows = []
    for point in points:
        f = point.figure
        rows.append(
            [
                Cell(f.model.name),
                num(billions(f.model.parameter_count)),
                num(f.usd_per_million),
                num(f.usd_per_million_at_capacity),
                Cell(capacity_text(f.capacity)),
                Cell(gpus_text(f)),
                Cell(f.image_tag),
                Cell(config_text(f.serve_config), wrap=True),
                Cell(f.cost.load or ""),
                num(f.throughput_per_gpu),
                num(f.p99_ms("ttft")),
                num(f.p99_ms("tpot")),
                num(f.p99_ms("itl")),
                Cell("yes" if point.pareto else ""),
                Cell(f.ranked_by),
            ]
        )
    table.rows = simulated_first(table, rows)
    return table


def model_chart_data(points: list[ModelPoint]) -> list[dict]:
    """The chart's points, from the same figures as the table (numbers as exact text)."""
    return [
        {
            "model": p.figure.model.name,
            "parameters": p.figure.model.parameter_count,
            # The cost the front was drawn by: at capacity where the trial found one.
            "usd_per_million": text(p.figure.ranking_usd_per_million),
            "ranked_by": p.figure.ranked_by,
            "throughput_per_gpu": text(p.figure.throughput_per_gpu),
            # Named as the level result's figure it shows.
            protocol.latency_field("p99", "ttft"): text(p.figure.p99_ms("ttft")),
            "pareto": p.pareto,
            "simulated": p.figure.simulated,
        }
        for p in points
    ]


# --- Spend -----------------------------------------------------------------------------------


def month_table(months: list[MonthSpend]) -> ReportTable:
    table = ReportTable(
        key="months",
        title="Spend by month (UTC)",
        columns=[
            "Month",
            "Runs",
            "Spend USD",
            "Budget USD",
            "Budget",
            "Remaining USD",
            "Used %",
        ],
        empty="No runs and no monthly budget yet.",
    )
    for m in months:
        table.rows.append(
            [
                Cell(m.month.strftime("%Y-%m")),
                num(m.runs),
                num(m.spend_usd),
                num(m.budget_usd),
                Cell(m.budget_scope),
                num(m.remaining_usd),
                num(m.used_pct),
            ]
        )
    return table


def cold_start_table(groups: list[ColdStartGroup], *, simulated: bool) -> ReportTable:
    """One row per (GPU type, image tag) and span of the cold start: long, so that a CSV
    pivots it as its reader likes."""
    table = ReportTable(
        key="simulated" if simulated else "measured",
        title="Simulated cold starts" if simulated else "Cold starts",
        columns=["GPU type", "Image tag", "Span from the pod request", "Runs", "Median s", "p90 s"],
        simulated=simulated,
        empty="No run has rented a pod yet." if not simulated else "No simulated run yet.",
        note="Seconds from the pod requested to each moment, as observed; the weights "
        "download is its own duration (runs that found the weights cached are not in it).",
    )
    for group in groups:
        if group.simulated != simulated:
            continue
        for span in REPORT_SPANS:
            figures = group.spans[span]
            table.rows.append(
                [
                    Cell(group.gpu_type),
                    Cell(group.image_tag),
                    Cell(span),
                    num(figures.runs),
                    num(figures.median),
                    num(figures.p90),
                ]
            )
    return table


def experiment_spend_table(rows: list[ExperimentSpend], experiment_href) -> ReportTable:
    table = ReportTable(
        key="experiments",
        title="Spend by experiment",
        columns=[
            "Experiment",
            "Engine",
            "Model",
            "Runs",
            "Spend USD",
            "Experiment budget USD",
            "Remaining USD",
            "Used %",
            "Per-run cap USD",
        ],
        empty="No runs yet.",
        note="Simulated experiments rent no GPU: their runs cost nothing and are labelled.",
    )
    for row in rows:
        e = row.experiment
        table.rows.append(
            [
                Cell(e.name, href=experiment_href(e)),
                Cell("simulated", badge=True) if e.simulated else Cell(e.engine),
                Cell(e.model.name),
                num(row.runs),
                num(row.spend_usd),
                num(row.budget_usd),
                num(row.remaining_usd),
                num(row.used_pct),
                num(e.budget_cap_usd),
            ]
        )
    return table


# --- CSV -------------------------------------------------------------------------------------


def csv_response(table: ReportTable, *, filename: str) -> HttpResponse:
    """The table as a CSV file: a header row, then one row per table row, cell for cell."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(table.columns)
    for row in table.rows:
        writer.writerow([cell.text for cell in row])
    response = HttpResponse(buffer.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
