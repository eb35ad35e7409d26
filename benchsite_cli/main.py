"""``benchsite`` commands: parse arguments, call the API, print, and pick the exit code.

Guarantees: exit 0 on success, 1 when the gate finds a regression beyond a threshold (or
``experiments validate`` finds the draft invalid), 2 on any error, with one clear line on
stderr. The token is never printed: everything written to stdout and stderr passes through a
filter that masks it, ``--verbose`` included. Arguments (thresholds, baseline, files) are
checked before anything is started, so a typo never rents a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import yaml

from benchsite_cli import EXIT_ERROR, EXIT_OK, EXIT_REGRESSION
from benchsite_cli.client import ApiClient, CliError
from benchsite_cli.gate import (
    ROW_COLUMNS,
    GateResult,
    NothingToCompare,
    Threshold,
    ThresholdError,
    format_change,
    format_value,
    gate_compare,
    parse_thresholds,
    row_cells,
)
from benchsite_cli.gate_files import junit_write, markdown_write
from benchsite_cli.level_results import OUTPUT_THROUGHPUT, SUMMARY_FIGURES, level_figure
from benchsite_cli.progress import progress_for

TERMINAL_STATES = {"succeeded", "failed", "cancelled", "over_budget"}


class Redacting:
    """A text stream that masks the token wherever it would appear."""

    def __init__(self, stream: TextIO, secret: str):
        self._stream, self._secret = stream, secret

    def write(self, text: str) -> int:
        if self._secret:
            text = text.replace(self._secret, "***")
        return self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _out(*parts: Any) -> None:
    print(*parts, file=sys.stdout, flush=True)


def _err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


# --- arguments ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: given before or after the command, a flag is never reset by the other parser.
    common.add_argument("--url", default=argparse.SUPPRESS, help="default $BENCHSITE_URL")
    common.add_argument("--org", default=argparse.SUPPRESS, help="default $BENCHSITE_ORG")
    common.add_argument(
        "--verbose", "-v", action="store_true", default=argparse.SUPPRESS, help="log requests"
    )

    parser = argparse.ArgumentParser(
        prog="benchsite",
        description="Benchsite from the command line and CI (token in $BENCHSITE_TOKEN).",
        parents=[common],
    )
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")

    experiments = groups.add_parser("experiments", help="list, show, create, validate")
    exp = experiments.add_subparsers(dest="action", required=True)
    exp.add_parser("list", parents=[common])
    show = exp.add_parser("show", parents=[common], help="an experiment as YAML")
    show.add_argument("experiment", help="id or exact name")
    for name in ("create", "validate"):
        sub = exp.add_parser(name, parents=[common])
        sub.add_argument("--file", "-f", required=True, type=Path, help="experiment YAML")

    runs = groups.add_parser("runs", help="start, show, cancel, compare")
    run = runs.add_subparsers(dest="action", required=True)
    start = run.add_parser("start", parents=[common], help="start a run (and gate it)")
    start.add_argument("experiment", help="id or exact name")
    start.add_argument("--reason", default="", help='why, e.g. "commit abc123"')
    start.add_argument("--trigger", default="ci", choices=["ci", "api"])
    start.add_argument("--wait", action="store_true", help="wait until the run ends")
    _gate_arguments(start)
    start.add_argument("--poll", type=float, default=5.0, help="seconds between polls")
    start.add_argument("--timeout", type=float, default=6 * 3600, help="give up after (s)")

    show = run.add_parser("show", parents=[common])
    show.add_argument("run")
    show.add_argument("--json", dest="json_out", type=Path, help="also write the run as JSON")
    cancel = run.add_parser("cancel", parents=[common])
    cancel.add_argument("run")
    cancel.add_argument("--reason", default="")
    compare = run.add_parser("compare", parents=[common], help="gate a finished run")
    compare.add_argument("run")
    _gate_arguments(compare, baseline_required=True)

    models = groups.add_parser("models", help="list, show")
    mod = models.add_subparsers(dest="action", required=True)
    mod.add_parser("list", parents=[common])
    show = mod.add_parser("show", parents=[common])
    show.add_argument("model", help="id or exact name")

    audit = groups.add_parser("audit", help="export")
    aud = audit.add_subparsers(dest="action", required=True)
    export = aud.add_parser("export", parents=[common])
    export.add_argument("--out", type=Path, help="file (default stdout)")
    export.add_argument("--format", choices=["csv", "json"], default="csv")
    export.add_argument("--event", help="'run.start' or a prefix such as 'run.'")
    export.add_argument("--since", help="ISO date-time")
    return parser


def _gate_arguments(parser: argparse.ArgumentParser, baseline_required: bool = False) -> None:
    parser.add_argument(
        "--baseline",
        required=baseline_required,
        help="promoted | last-succeeded | RUN_ID",
    )
    parser.add_argument(
        "--max-regression",
        default="",
        help="METRIC=PCT%%,… e.g. p99_ttft_ms=10%%,output_throughput=-5%%,cost_per_mtok=5%% "
        "(+: fail if it rose by more; -: fail if it fell by more)",
    )
    parser.add_argument("--json", dest="json_out", type=Path, help="write run + gate as JSON")
    parser.add_argument("--junit", type=Path, help="write the gate as JUnit XML")
    parser.add_argument("--markdown", type=Path, help="write the gate as Markdown")


# --- entry point ----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    token = os.environ.get("BENCHSITE_TOKEN", "")
    sys.stdout = Redacting(sys.stdout, token)  # type: ignore[assignment]
    sys.stderr = Redacting(sys.stderr, token)  # type: ignore[assignment]
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed its usage line; 2 is our error code too
        return EXIT_ERROR if exc.code else EXIT_OK
    try:
        return _dispatch(args, token)
    except CliError as exc:
        _err(f"error: {exc}")
        for field, messages in exc.fields.items():
            for message in messages:
                _err(f"  {field}: {message}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        _err("error: interrupted (a started run keeps running; `benchsite runs cancel` stops it)")
        return EXIT_ERROR


def _dispatch(args: argparse.Namespace, token: str) -> int:
    url = getattr(args, "url", None) or os.environ.get("BENCHSITE_URL", "")
    org = getattr(args, "org", None) or os.environ.get("BENCHSITE_ORG", "")
    if not token:
        raise CliError("BENCHSITE_TOKEN is not set (an API token of the organization)")
    if not url:
        raise CliError("no site URL: set BENCHSITE_URL or pass --url")
    if not org:
        raise CliError("no organization: set BENCHSITE_ORG or pass --org")
    if "://" not in url:
        raise CliError(f"bad site URL {url!r}: expected http(s)://host[:port]")
    log = (lambda line: _err(f"· {line}")) if getattr(args, "verbose", False) else None
    api = ApiClient(base_url=url, token=token, org=org, log=log)
    try:
        handler = COMMANDS[(args.group, args.action)]
        return handler(api, args)
    finally:
        api.close()


# --- experiments ----------------------------------------------------------------------------


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{path} is not valid YAML: {exc}".replace("\n", " ")) from None
    if not isinstance(document, dict):
        raise CliError(f"{path}: expected a mapping of experiment fields at the top level")
    # YAML dates and the like become the strings the API reads.
    return json.loads(json.dumps(document, default=str))


def _find(api: ApiClient, path: str, ref: str, what: str) -> dict[str, Any]:
    """A row by id, or by exact name when ``ref`` is not an id."""
    if _looks_like_uuid(ref):
        return api.get(f"{path}/{ref}/")
    params = {"name": ref} if path == "experiments" else None
    matches = [row for row in api.list_all(f"{path}/", params) if row.get("name") == ref]
    if len(matches) != 1:
        found = "no" if not matches else f"{len(matches)}"
        raise CliError(f"{found} {what} named {ref!r} in this organization")
    return api.get(f"{path}/{matches[0]['id']}/")


def _looks_like_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def experiments_list(api: ApiClient, args) -> int:
    _print_list(
        api,
        "experiments/",
        {
            "id": lambda e: e["id"],
            "name": lambda e: e["name"],
            "engine": lambda e: e.get("engine", ""),
            "trials": lambda e: e.get("trials", ""),
            "gpu": lambda e: e.get("gpu_type", ""),
        },
    )
    return EXIT_OK


def experiments_show(api: ApiClient, args) -> int:
    _print_yaml(_find(api, "experiments", args.experiment, "experiment"))
    return EXIT_OK


def experiments_create(api: ApiClient, args) -> int:
    body = _read_yaml(args.file)
    experiment = api.post("experiments/", body)
    _out(f"created experiment {experiment['id']} ({experiment['name']})")
    return EXIT_OK


def experiments_validate(api: ApiClient, args) -> int:
    body = _read_yaml(args.file)
    try:
        estimate = api.post("experiments/validate/", body)
    except CliError as exc:
        if not exc.fields:
            raise
        _err(f"{args.file}: invalid")
        for field, messages in exc.fields.items():
            for message in messages:
                _err(f"{field}: {message}")
        return EXIT_REGRESSION  # the check's answer, not a failure to check
    _out(
        f"{args.file}: valid — {estimate['trials']} trials × {estimate['levels_per_trial']} "
        f"levels, about {estimate['total_seconds'] / 60:.0f} min, "
        f"${estimate['cost_usd']} (cap ${estimate['budget_cap_usd']})"
    )
    for warning in estimate.get("warnings") or []:
        _out(f"warning: {warning}")
    return EXIT_OK


# --- runs -----------------------------------------------------------------------------------


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
    api: ApiClient, spec: str, *, experiment_id: str, exclude: str | None = None
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
    if not _looks_like_uuid(spec):
        raise CliError(f"--baseline: expected promoted, last-succeeded or a run id, not {spec!r}")
    run = api.get(f"runs/{spec}/")
    if run["state"] != "succeeded":
        raise CliError(f"--baseline: run {spec} ended {run['state']}, not succeeded")
    return run, f"run {spec}", None


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
    return run, f"promoted (trial {promotion['trial_index']})", promotion["trial_index"]


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
    experiment = _find(api, "experiments", args.experiment, "experiment")
    baseline = None
    if gating:  # resolved first: a missing baseline must not cost a run
        baseline = _resolve_baseline(api, args.baseline, experiment_id=experiment["id"])

    run = api.post(
        "runs/", {"experiment": experiment["id"], "reason": args.reason, "trigger": args.trigger}
    )
    _out(f"started run {run['id']} of {experiment['name']} ({run['state']})")
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
    _out(f"run {run['id']}: {run['state']}{requested}")
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
        api, args.baseline, experiment_id=run["experiment"], exclude=run["id"]
    )
    return _gate(run, baseline, thresholds, args)


# --- models and audit -----------------------------------------------------------------------


def models_list(api: ApiClient, args) -> int:
    _print_list(
        api,
        "models/",
        {
            "id": lambda m: m["id"],
            "name": lambda m: m["name"],
            "hf repo": lambda m: m.get("hf_repo", ""),
            "params": lambda m: f"{(m.get('parameter_count') or 0) / 1e9:.1f}B",
        },
    )
    return EXIT_OK


def models_show(api: ApiClient, args) -> int:
    _print_yaml(_find(api, "models", args.model, "model"))
    return EXIT_OK


def audit_export(api: ApiClient, args) -> int:
    params = {"as": args.format}
    params.update({k: v for k, v in (("event", args.event), ("since", args.since)) if v})
    if args.out is None:
        api.stream_to("audit/export/", params, lambda chunk: sys.stdout.write(chunk.decode()))
        return EXIT_OK
    partial = args.out.with_name(args.out.name + ".part")
    try:
        with partial.open("wb") as file:
            api.stream_to("audit/export/", params, file.write)
    except OSError as exc:
        raise CliError(f"cannot write {args.out}: {exc.strerror}") from None
    except CliError:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(args.out)  # a half-downloaded log never takes the file's name
    _err(f"wrote {args.out}")
    return EXIT_OK


# --- printing -------------------------------------------------------------------------------


def _print_list(api: ApiClient, path: str, columns: dict[str, Callable[[dict], Any]]) -> None:
    """Every row of a list endpoint as a table, one column per ``{header: value of a row}``."""
    rows = [tuple(str(value(row)) for value in columns.values()) for row in api.list_all(path)]
    _table(tuple(columns), rows)


def _print_yaml(document: dict[str, Any]) -> None:
    _out(yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip())


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A plain, aligned table (readable in a CI log and with ``grep``)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    for line in (headers, *rows):
        cells = (str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
        _out("  ".join(cells).rstrip())


def _print_run_summary(run: dict[str, Any]) -> None:
    _out(
        f"run {run['id']}: {run['state']}, cost ${run.get('cost_usd')}, "
        f"{len(run.get('trials') or [])} trials"
        + (f" — {run['failure_reason']}" if run.get("failure_reason") else "")
    )
    rows = []
    for trial in run.get("trials") or []:
        for m in trial.get("measurements") or []:
            result = m.get("result") or {}
            load = (
                f"c={m['concurrency']}"
                if m.get("concurrency") is not None
                else f"rate={m.get('request_rate')}"
            )
            rows.append(
                (
                    str(trial["index"]),
                    trial.get("outcome", ""),
                    load,
                    *(format_value(level_figure(result, name)) for name in SUMMARY_FIGURES),
                )
            )
    if rows:
        headers = (_SHORT_HEADERS.get(name, name) for name in SUMMARY_FIGURES)
        _table(("trial", "outcome", "load", *headers), rows)


# A run summary's columns are headed by the figure's name, shortened where it is long.
_SHORT_HEADERS = {OUTPUT_THROUGHPUT: "output_tok/s"}


def _print_gate(result: GateResult) -> None:
    verdict = "FAILED" if result.failed else "passed"
    _out(
        f"gate {verdict}: run {result.new_run} vs {result.baseline_kind} "
        f"(run {result.baseline_run})"
    )
    _table(
        (*ROW_COLUMNS, "verdict"),
        [
            (*row_cells(row), row.verdict.upper() if row.failed else row.verdict)
            for row in result.rows
        ],
    )
    for config in result.unmatched_configs:
        _out(f"not gated (no baseline): {config}")
    for metric, why in result.not_compared.items():
        _out(f"not compared: {metric} {why}")
    for row in result.regressions():
        _err(
            f"regression: {row.metric} at {row.config} {row.level}: "
            f"{format_value(row.baseline)} → {format_value(row.new)} "
            f"({format_change(row)}, limit {row.limit.text()})"
        )


def _write_json(path: Path | None, run: dict, result: GateResult | None) -> None:
    if path is None:
        return
    body = {"run": run, "gate": None if result is None else result.as_json()}
    path.write_text(json.dumps(body, indent=2, default=str) + "\n", encoding="utf-8")


COMMANDS = {
    ("experiments", "list"): experiments_list,
    ("experiments", "show"): experiments_show,
    ("experiments", "create"): experiments_create,
    ("experiments", "validate"): experiments_validate,
    ("runs", "start"): runs_start,
    ("runs", "show"): runs_show,
    ("runs", "cancel"): runs_cancel,
    ("runs", "compare"): runs_compare,
    ("models", "list"): models_list,
    ("models", "show"): models_show,
    ("audit", "export"): audit_export,
}
