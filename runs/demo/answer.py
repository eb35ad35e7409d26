"""The demo's printed answer: per configuration and load level, TTFT / ITL / TPOT p50 and
p99, output tokens/s, the cost per 1M output tokens and the SLO check; then each
configuration's capacity at the SLOs and the recommendation (``runs.selectors.run_answer``).

Guarantees: every figure is read from the stored measurements as the protocol's
``LevelResult`` (``runs.selectors.level_results``) and priced by ``runs.costs``' rules, as
the site's pages are; a simulated table says SIMULATED, a CPU table says it is no GPU figure.
"""

from __future__ import annotations

import os

from rich.console import Console
from rich.table import Table

from agents import protocol
from agents.protocol import VERDICT_WORDS, level_verdict, load_verdict
from figures.margins import margin_interval_words, margin_words
from runs.costs import level_cost_per_million_output_tokens
from runs.demo.plans import DemoPlan
from runs.demo.vllm_cpu import VllmSetup
from runs.models import Run
from runs.selectors.level_results import stored_level_result
from runs.selectors.run_answer import ConfigAnswer, Margin, RunAnswer, run_answer
from runs.selectors.trial_costs import trial_costs


def _ms(value) -> str:
    """Milliseconds, short enough for an 80-column terminal."""
    if value is None:
        return "–"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _pair(result: protocol.LevelResult, metric: str) -> str:
    """``metric``'s p50/p99 in ms."""
    return f"{_ms(result.latency_ms('median', metric))}/{_ms(result.latency_ms('p99', metric))}"


def _slo_verdict(results: list[dict]) -> str:
    """The verdict at the SLOs' confidence of a load measured by ``results`` (every
    measurement of it, pooled, as the answer judges it), in words ("–" without SLOs)."""
    if level_verdict(results[0].get("slo")) is None:
        return "–"
    verdict = load_verdict(results)
    words = VERDICT_WORDS[verdict]
    return (
        words if verdict == "met" else f"[{'red' if verdict == 'missed' else 'yellow'}]{words}[/]"
    )


def levels_table(title: str, flag_heading: str, rows: list[tuple[str, ...]]) -> Table:
    """Every level of the run, a row each: the flag's value, the load, p50/p99 of TTFT, ITL
    and TPOT, tokens/s, $/1M and the verdict. Fits 80 columns with the demo's widest figures
    ("16384", "25*", "36.5/38.4", "too close"): columns share their padding, and a verdict
    never wraps."""
    table = Table(title=title, title_justify="left", collapse_padding=True)
    for column in (flag_heading, "c", "TTFT ms", "ITL ms", "TPOT ms", "tok/s", "$/1M"):
        table.add_column(column, justify="right")
    table.add_column("SLOs", justify="right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def print_answer(run: Run, plan: DemoPlan, vllm: VllmSetup | None, console: Console) -> None:
    """How ``run`` ended, its table and the winner under the SLOs (or that none met them)."""
    console.print(f"Run {run.state}" + (f": {run.failure_reason}" if run.failure_reason else ""))
    experiment = run.experiment
    gpu = experiment.gpu_type
    legend = (
        f"{plan.flag_heading} = {plan.flag}, c = concurrency (* = a capacity search's probe), "
        "latencies p50/p99 in ms of the steady window, $/1M = USD per 1M output tokens"
    )
    if vllm is None:
        title = "SIMULATED — an H100 modelled by the simulator, not measured.\n" + legend
    else:
        title = (
            f"REAL vLLM {vllm.version} (vllm-cpu) on this machine's CPU "
            f"({os.cpu_count()} cores, float32) serving a tiny random-weight Llama "
            f"({experiment.model.parameter_count:,} parameters): measured, but not a GPU "
            f"figure.\n{legend} at the catalogue price of 1× {gpu.display_name} (below)"
        )
    rows: list[tuple[str, ...]] = []
    best = []
    starts = []
    bursts = False
    rate = None  # the pod's USD/h the costs are priced at (the same for every trial)
    for trial in run.trials.order_by("index").prefetch_related("measurements"):
        config = trial.serve_config.get(plan.flag, "default")
        cost = trial_costs(trial=trial)
        rate = cost.pod_usd_per_hr
        if cost.cold_start_seconds is not None:
            starts.append(f"{plan.flag}={config} {cost.cold_start_seconds:.0f} s")
        measurements = sorted(trial.measurements.all(), key=lambda m: m.concurrency or 0)
        for m in measurements:
            result = stored_level_result(m.result)
            same_load = [o.result for o in measurements if o.concurrency == m.concurrency]
            bursts = bursts or result.median_itl_ms == 0
            level_cost = (
                None
                if not rate  # no price known (or a free one): no cost per token to show
                else level_cost_per_million_output_tokens(
                    output_throughput_tok_s=result.output_throughput,
                    pod_usd_per_hr=rate,
                    share=cost.share,
                )
            )
            rows.append(
                (
                    str(config),
                    f"{m.concurrency}" + ("*" if result.probe else ""),
                    _pair(result, "ttft"),
                    _pair(result, "itl"),
                    _pair(result, "tpot"),
                    f"{result.output_throughput or 0:,.0f}",
                    "–" if level_cost is None else f"${level_cost:.3f}",
                    _slo_verdict(same_load),
                )
            )
        if cost.usd_per_million_output_tokens is not None:
            best.append((cost.usd_per_million_output_tokens, config, cost.load))
    console.print(levels_table(title, plan.flag_heading, rows))
    if vllm is not None:
        console.print(
            "vLLM start, process to first token: " + (", ".join(starts) or "none recorded")
        )
        if bursts:
            console.print(
                "An ITL p50 of 0.0 ms: several of vLLM's stream messages arrived in one "
                "read — a tiny model on shared cores outruns the server's streaming."
            )
        console.print(
            f"Cost: a local pod rents nothing — {run.billed_seconds or 0:.0f} s billed, "
            f"run cost ${run.cost_usd or 0:.2f}. The $/1M column is what Benchsite does "
            "for every local pod: the measured tokens/s priced at the catalogue rate of "
            f"the experiment's GPU ({gpu.display_name}"
            + (f", ${rate:.2f}/h" if rate is not None else "")
            + "); nothing was bought at that price."
        )
    answer = run_answer(run=run)
    where = (
        "simulated H100, catalogue price"
        if vllm is None
        else f"real vLLM on this CPU, tiny model; {gpu.display_name} catalogue price"
    )
    if any(config.axis for config in answer.configs):
        print_capacity_answer(answer, plan, where, console)
        return
    if best:
        price, config, load = min(best)
        console.print(
            f"[bold green]Winner under the SLOs[/] ({answer.slos}): {plan.flag}={config} at "
            f"{load}, ${price:.3f} per 1M output tokens ({where})."
        )
    else:
        console.print("[red]No configuration met the SLOs at any load level.[/]")


def _cost(config: ConfigAnswer) -> str:
    if config.usd_per_million_output_tokens is None:
        return "–"
    text = f"${config.usd_per_million_output_tokens:.3f}"
    if config.usd_per_million_ci95:
        low, high = config.usd_per_million_ci95
        text += f" ({low:.3f}–{high:.3f})"
    return text


def _load(value: float | None) -> str:
    return "–" if value is None else f"{value:g}"


def _margin_line(margin: Margin, other: str, whose: str, capacity: float | None) -> str:
    """``OTHER costs 20 % more (95 % CI 19–22 %) at its capacity 12.``, or a tie: the
    margin in ``figures.margins``' words, as every page and the CLI say it."""
    ci = margin_interval_words(margin.ci95_pct)
    words = margin_words(margin.pct, tie=margin.tie, other=other, plural=whose == "their")
    return f"  {words}{f' ({ci})' if ci else ''} at {whose} capacity {_load(capacity)}."


def config_name(config: ConfigAnswer, plan: DemoPlan) -> str:
    """``max_num_batched_tokens=2048``, or "vLLM's defaults" for the trial that sets none."""
    value = config.serve_config.get(plan.flag)
    return "vLLM's defaults" if value is None else f"{plan.flag}={value}"


def print_capacity_answer(answer: RunAnswer, plan: DemoPlan, where: str, console: Console) -> None:
    """Each configuration's capacity at the SLOs, then the recommendation with its margin."""
    table = Table(
        title=f"Capacity at the SLOs ({answer.slos}): the highest concurrency that met them, "
        "\\[last pass, first fail], output tokens/s there and the cost per 1M output tokens "
        "with its 95 % interval",
        title_justify="left",
    )
    for column in (plan.flag_heading, "capacity", "bracket", "probes", "tok/s", "$/1M (95 % CI)"):
        table.add_column(column, justify="right")
    for config in answer.configs:
        table.add_row(
            str(config.serve_config.get(plan.flag, "default")),
            _load(config.capacity) if config.capacity is not None else config.note or "–",
            f"[{_load(config.bracket_low)}, {_load(config.bracket_high)}]",
            str(config.probes),
            "–" if config.output_throughput is None else f"{config.output_throughput:,.0f}",
            _cost(config),
        )
    console.print(table)
    winner, second = answer.winner, answer.runner_up
    if winner is None:
        console.print("[red]No configuration met the SLOs at any load.[/]")
        return
    name = config_name(winner, plan)
    console.print(
        f"[bold green]Answer[/] ({where}): {name} carries {_load(winner.capacity)} concurrent "
        f"users within {answer.slos}, at ${winner.usd_per_million_output_tokens:.3f} per 1M "
        "output tokens."
    )
    # A runner-up that is vLLM's defaults is said once, by the defaults' line below.
    said_below = second is answer.defaults and answer.over_defaults is not None
    if second is not None and answer.margin_pct is not None and not said_below:
        margin = Margin(answer.margin_pct, answer.margin_ci95_pct, answer.tie)
        console.print(_margin_line(margin, config_name(second, plan), "its", second.capacity))
    if answer.over_defaults is not None:
        defaults = answer.defaults.capacity
        console.print(_margin_line(answer.over_defaults, "vLLM's defaults", "their", defaults))
    elif answer.defaults is not None and answer.defaults is not winner:
        console.print(f"  vLLM's defaults: {answer.defaults.note or 'no cost at capacity'}.")
    # Whole, on one line however narrow the terminal: a command broken across lines
    # cannot be copied and pasted.
    console.print(f"  {winner.serve_command}", soft_wrap=True, highlight=False, markup=False)
