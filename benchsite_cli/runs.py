"""``benchsite runs start | show | cancel | compare``: runs, waiting for them and the gate.

Guarantees: thresholds, the baseline and output paths are checked before a run is started,
so a typo never rents a GPU; a run that ends other than succeeded is an error (exit 2); the
gate exits 1 on a regression beyond a threshold.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from benchsite_cli import EXIT_OK, EXIT_REGRESSION
from benchsite_cli.client import ApiClient, CliError
from benchsite_cli.gate import (
    GateResult,
    NothingToCompare,
    Row,
    Threshold,
    ThresholdError,
    config_label,
    format_value,
    gate_compare,
    parse_thresholds,
    promoted_baseline_kind,
    result_columns,
    row_cells,
    shows_images,
)
from benchsite_cli.gate_files import junit_write, markdown_write
from benchsite_cli.level_results import SUMMARY_FIGURES, level_figure
from benchsite_cli.lookup import find_row, looks_like_run_id
from benchsite_cli.output import dollars, err, out, table
from benchsite_cli.progress import progress_for
from figures.level_results import OUTPUT_THROUGHPUT
from figures.levels import level_name
from figures.margins import margin_interval_words, margin_words

TERMINAL_STATES = {"succeeded", "failed", "cancelled", "over_budget"}


def _thresholds(args) -> list[Threshold]:
    if not args.max_regression:
        return []
    try:
        return parse_thresholds(args.max_regression)
    except ThresholdError as exc:
        raise CliError(f"--max-regression: {exc}") from None


def _check_output_paths(args) -> None:
    for option in ("json_out", "junit", "markdown"):
        path = getattr(args, option, None)
        if path is not None and not path.parent.exists():
            flag = "--json" if option == "json_out" else f"--{option}"
            raise CliError(f"{flag}: the directory {path.parent} does not exist")


def _resolve_baseline(
    api: ApiClient,
    spec: str,
    *,
    experiment_id: str,
    exclude: str | None = None,
    across_experiments: bool = False,
) -> tuple[dict[str, Any], str, int | None]:
    """(baseline run detail, how it was chosen, the one trial to compare or None)."""
    if spec == "promoted":
        return _promoted_baseline(api, experiment_id)
    if spec == "last-succeeded":
        for row in api.list_all("runs/", {"experiment": experiment_id, "state": "succeeded"}):
            if row["id"] != exclude:
                return api.get(f"runs/{row['id']}/"), "last-succeeded", None
        raise CliError(
            f"--baseline last-succeeded: experiment {experiment_id} has no succeeded run yet"
        )
    if not looks_like_run_id(spec):
        raise CliError(f"--baseline: expected promoted, last-succeeded or a run id, not {spec!r}")
    run = api.get(f"runs/{spec}/")
    if run["state"] != "succeeded":
        raise CliError(f"--baseline: run {run['id']} ended {run['state']}, not succeeded")
    if run["experiment"] != experiment_id:
        # Another experiment's grid, workload or SLOs may differ: a gate across them compares
        # unlike runs, so it is done only when asked for, and said each time.
        if not across_experiments:
            raise CliError(
                f"--baseline: run {run['id']} is of experiment {run['experiment']}, not "
                f"{experiment_id}; give --across-experiments to gate against it anyway"
            )
        err(
            f"warning: gating across experiments: the baseline run {run['id']} is of "
            f"experiment {run['experiment']}, the new run of {experiment_id}"
        )
    return run, f"run {run['id']}", None


def _promoted_baseline(api: ApiClient, experiment_id: str) -> tuple[dict[str, Any], str, int]:
    """The experiment's approved promotion (the site keeps at most one): its run, narrowed to
    the promoted trial."""
    promotions = api.get(
        "promotions/", {"state": "approved", "experiment": experiment_id, "page_size": 1}
    ).get("results", [])
    if not promotions:
        raise CliError(
            f"--baseline promoted: experiment {experiment_id} has no approved promotion "
            "(propose a trial and have an owner or admin approve it, or use "
            "--baseline last-succeeded)"
        )
    promotion = promotions[0]
    run = api.get(f"runs/{promotion['run']}/")
    # A site older than the ``simulated`` field promoted measured trials only.
    kind = promoted_baseline_kind(
        trial_index=promotion["trial_index"], simulated=bool(promotion.get("simulated"))
    )
    return run, kind, promotion["trial_index"]


def runs_start(api: ApiClient, args) -> int:
    thresholds = _thresholds(args)
    _check_output_paths(args)
    gating = bool(args.baseline)
    if thresholds and not gating:
        raise CliError("--max-regression needs --baseline")
    if gating and not thresholds:
        raise CliError("--baseline needs --max-regression (the thresholds to gate on)")
    if (args.junit or args.markdown) and not gating:
        raise CliError("--junit and --markdown write the gate: give --baseline too")
    experiment = find_row(api, "experiments", args.experiment, "experiment")
    baseline = None
    if gating:  # resolved first: a missing baseline must not cost a run
        baseline = _resolve_baseline(
            api,
            args.baseline,
            experiment_id=experiment["id"],
            across_experiments=args.across_experiments,
        )

    body = {"experiment": experiment["id"], "reason": args.reason, "trigger": args.trigger}
    if args.image_tag:
        body["image_tag"] = args.image_tag  # this run only: the experiment keeps its own
    if args.noise_seed is not None:
        body["noise_seed"] = args.noise_seed  # the site refuses it for a real engine
    run = api.post("runs/", body)
    on = f" on {args.image_tag}" if args.image_tag else ""
    out(f"started run {run['id']} of {experiment['name']}{on} ({run['state']})")
    if not (args.wait or gating or args.json_out):
        return EXIT_OK
    run = _wait(
        api, run, total_trials=experiment.get("trials"), poll=args.poll, timeout=args.timeout
    )
    if run["state"] != "succeeded":
        _write_json(args.json_out, run, None)
        reason = run.get("failure_reason") or run.get("cancel_reason") or ""
        raise CliError(f"run {run['id']} ended {run['state']}" + (f": {reason}" if reason else ""))
    _print_run_summary(run)
    if baseline is None:
        _write_json(args.json_out, run, None)
        return EXIT_OK
    return _gate(run, baseline, thresholds, args)


def _gate(run, baseline, thresholds, args) -> int:
    baseline_run, kind, trial = baseline
    try:
        result = gate_compare(
            new_run=run,
            baseline_run=baseline_run,
            thresholds=thresholds,
            baseline_kind=kind,
            baseline_trial=trial,
        )
    except NothingToCompare as exc:
        raise CliError(str(exc)) from None
    _print_gate(result)
    _write_json(args.json_out, run, result)
    if args.junit:
        junit_write(result, args.junit, run=run)
    if args.markdown:
        markdown_write(result, args.markdown, run=run)
    return EXIT_REGRESSION if result.failed else EXIT_OK


def _wait(api: ApiClient, run: dict, *, total_trials, poll: float, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    with progress_for(sys.stdout, run_id=run["id"], total_trials=total_trials) as progress:
        while True:
            detail = api.get(f"runs/{run['id']}/")
            progress.update(detail)
            if detail["state"] in TERMINAL_STATES:
                return detail
            if time.monotonic() > deadline:
                raise CliError(
                    f"run {run['id']} still {detail['state']} after {timeout:.0f} s; it keeps "
                    "running (benchsite runs cancel stops it)"
                )
            time.sleep(poll)


def runs_show(api: ApiClient, args) -> int:
    run = api.get(f"runs/{args.run}/")
    _print_run_summary(run)
    _write_json(args.json_out, run, None)
    return EXIT_OK


def runs_cancel(api: ApiClient, args) -> int:
    run = api.post(f"runs/{args.run}/cancel/", {"reason": args.reason})
    requested = (
        " (cancel requested; the agent stops next)" if run["state"] not in (TERMINAL_STATES) else ""
    )
    out(f"run {run['id']}: {run['state']}{requested}")
    return EXIT_OK


def runs_compare(api: ApiClient, args) -> int:
    thresholds = _thresholds(args)
    if not thresholds:
        raise CliError("--max-regression is required (the thresholds to gate on)")
    _check_output_paths(args)
    run = api.get(f"runs/{args.run}/")
    if run["state"] != "succeeded":
        raise CliError(f"run {run['id']} is {run['state']}, not succeeded: nothing to gate")
    baseline = _resolve_baseline(
        api,
        args.baseline,
        experiment_id=run["experiment"],
        exclude=run["id"],
        across_experiments=args.across_experiments,
    )
    return _gate(run, baseline, thresholds, args)


def _print_run_summary(run: dict[str, Any]) -> None:
    out(
        f"run {run['id']}: {run['state']}, cost {dollars(run.get('cost_usd'))}, "
        f"{len(run.get('trials') or [])} trials"
        + (f" — {run['failure_reason']}" if run.get("failure_reason") else "")
    )
    trials = run.get("trials") or []
    # A run over several vLLM images says which image each trial ran on.
    images = len({trial.get("image_tag") for trial in trials if trial.get("image_tag")}) > 1
    rows = []
    for trial in trials:
        for m in trial.get("measurements") or []:
            result = m.get("result") or {}
            load = level_name(
                concurrency=m.get("concurrency"),
                request_rate=m.get("request_rate"),
                infinite=bool(m.get("request_rate_infinite")),
            )
            rows.append(
                (
                    str(trial["index"]),
                    *((trial.get("image_tag") or "",) if images else ()),
                    trial.get("outcome", ""),
                    load,
                    *(format_value(level_figure(result, name)) for name in SUMMARY_FIGURES),
                )
            )
    if rows:
        headers = (_SHORT_HEADERS.get(name, name) for name in SUMMARY_FIGURES)
        table(("trial", *(("image",) if images else ()), "outcome", "load", *headers), rows)
    _print_answer(run.get("answer"))


def _print_answer(answer: dict[str, Any] | None) -> None:
    """The run's answer (the API's ``answer``): the recommended configuration, its capacity
    at the SLOs, the cost per 1M output tokens there and its margin over the runner-up."""
    winner = (answer or {}).get("winner")
    if not winner:
        return
    label = " (simulated)" if answer.get("simulated") else ""
    cost = winner.get("usd_per_million_output_tokens")
    interval = winner.get("usd_per_million_ci95")
    out(
        f"answer{label}: trial {winner['trial']} {config_label(winner['serve_config'])}"
        + (f" on {winner['image_tag']}" if winner.get("image_tag") else "")
        + f" carries {_load_words(winner['capacity'], winner['axis'])} within {answer['slos']}, "
        f"${cost} per 1M output tokens"
        + (f" (95 % CI {interval[0]}–{interval[1]})" if interval else "")
    )
    runner_up = answer.get("runner_up")
    if runner_up and answer.get("margin_pct") is not None:
        # In the words the run page and the demo use (figures.margins).
        other = f"trial {runner_up['trial']} ({config_label(runner_up['serve_config'])})"
        words = margin_words(answer["margin_pct"], tie=bool(answer.get("tie")), other=other)
        ci = margin_interval_words(answer.get("margin_ci95_pct"))
        out(f"  {words}" + (f" ({ci})" if ci else ""))
    out(f"  {winner['serve_command']}")


def _load_words(load: float, axis: str) -> str:
    """A capacity as people say it (and the demo): ``64 concurrent users``, ``2.5 req/s``."""
    return f"{load:g} concurrent users" if axis == "concurrency" else f"{load:g} req/s"


# A run summary's columns are headed by the figure's name, shortened where it is long.
_SHORT_HEADERS = {OUTPUT_THROUGHPUT: "output_tok/s"}


def _print_gate(result: GateResult) -> None:
    verdict = "FAILED" if result.failed else "passed"
    out(
        f"gate {verdict}: run {result.new_run} vs {result.baseline_kind} "
        f"(run {result.baseline_run})"
    )
    images = shows_images(result)
    table(
        (*result_columns(result), "verdict"),
        [(*row_cells(row, image=images), _verdict_cell(row)) for row in result.rows],
    )
    for config in result.unmatched_configs:
        out(f"not gated (no baseline): {config}")
    for metric, why in result.not_compared.items():
        out(f"not compared: {metric} {why}")
    for row in result.regressions():
        err(
            f"regression: {row.metric} at {row.config} {row.level}: "
            f"{format_value(row.baseline)} → {format_value(row.new)}, "
            f"{row.metric} {row.change_text}: {row.why}"
        )


def _verdict_cell(row: Row) -> str:
    # A failing row's verdict in capitals, so it stands out in a CI log.
    verdict = row.verdict.upper() if row.failed else row.verdict
    return f"{verdict}: {row.why}" if row.why else verdict


def _write_json(path: Path | None, run: dict, result: GateResult | None) -> None:
    if path is None:
        return
    body = {"run": run, "gate": None if result is None else result.as_json()}
    path.write_text(json.dumps(body, indent=2, default=str) + "\n", encoding="utf-8")
