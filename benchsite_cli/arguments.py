"""The ``benchsite`` command's arguments: every command, its options and their help."""

from __future__ import annotations

import argparse
from pathlib import Path


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
    start.add_argument(
        "--image-tag",
        default="",
        help="run on this vLLM image tag instead of the experiment's (this run only): gate a "
        "vLLM bump against the promoted baseline",
    )
    start.add_argument(
        "--noise-seed",
        type=int,
        default=None,
        help="a simulated experiment only: the simulator's noise seed (the same seeds give the "
        "same figures; without it each run draws its own, a realistic re-run)",
    )
    start.add_argument("--wait", action="store_true", help="wait until the run ends")
    _gate_arguments(start)
    start.add_argument("--poll", type=float, default=5.0, help="seconds between polls")
    start.add_argument("--timeout", type=float, default=6 * 3600, help="give up after (s)")

    show = run.add_parser("show", parents=[common])
    show.add_argument("run", help="id, or the short id the site shows (a unique prefix)")
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
        help="promoted | last-succeeded | RUN_ID (or the short id the site shows)",
    )
    parser.add_argument(
        "--max-regression",
        default="",
        help="METRIC=PCT%%,… e.g. p99_ttft_ms=10%%,output_throughput=-5%%,cost_per_mtok=5%% "
        "(+: fail if it rose by more; -: fail if it fell by more)",
    )
    parser.add_argument(
        "--across-experiments",
        action="store_true",
        help="allow a baseline RUN_ID of another experiment (its grid, workload or SLOs may "
        "differ: the gate then compares unlike runs, and says so)",
    )
    parser.add_argument("--json", dest="json_out", type=Path, help="write run + gate as JSON")
    parser.add_argument("--junit", type=Path, help="write the gate as JUnit XML")
    parser.add_argument("--markdown", type=Path, help="write the gate as Markdown")
