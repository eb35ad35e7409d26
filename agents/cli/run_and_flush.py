"""``benchsite-agent run`` and ``flush``: a whole job, unattended, and the delivery of what an
earlier run left in its spool.

Guarantees: ``run`` exits 0 done and delivered, 2 bad job, 3 stopped early (cancel, deadline,
refused), 4 messages left undelivered in the spool (``flush`` sends them; it exits 4 while
any stay).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from agents.cli.bench import allow_many_connections
from agents.cli.usage import EXIT_USAGE, print_error
from agents.runner.job_source import JobError, load_job, run_token
from agents.runner.outbox import Outbox
from agents.runner.session import (
    EXIT_UNDELIVERED,
    SPOOL,
    SessionError,
    run_session,
    site_endpoints,
)
from agents.runner.summary import read_journal, summary_table
from agents.runner.trial_engine import EngineOptions


def _load_job_or_report(args: argparse.Namespace, errors: Console):
    try:
        return load_job(args.job)
    except JobError as exc:
        print_error(errors, exc)
        return None


def run_job_command(args: argparse.Namespace) -> int:
    allow_many_connections()
    console, errors = Console(), Console(stderr=True)
    job = _load_job_or_report(args, errors)
    if job is None:
        return EXIT_USAGE
    workdir = args.workdir or Path(f"run-{job.run_id}")
    try:
        engine_options = EngineOptions.from_environment()
    except ValueError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    try:
        result = run_session(
            job,
            token=run_token(),
            workdir=workdir,
            engine_options=engine_options,
            dataset_dir=args.dataset_dir,
            drain_timeout=args.drain_timeout,
            deadline_margin=args.deadline_margin,
        )
    except SessionError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    console.print(summary_table(read_journal(result.journal), simulated=job.engine.kind == "sim"))
    summary, delivery = result.summary, result.delivery
    console.print(
        f"run {summary.outcome}"
        + (f" ({summary.reason})" if summary.reason else "")
        + f": {summary.trials_succeeded} trials succeeded, {summary.trials_failed} failed, "
        f"{summary.trials_skipped} skipped; results in {workdir}",
        highlight=False,
    )
    if delivery.pending:
        errors.print(
            f"[red]{delivery.pending} messages not delivered[/]; they stay in "
            f"{workdir / 'spool'} — `benchsite-agent flush --workdir {workdir}` sends them",
            highlight=False,
        )
    return result.exit_code


def run_flush_command(args: argparse.Namespace) -> int:
    console, errors = Console(), Console(stderr=True)
    job = _load_job_or_report(args, errors)
    if job is None:
        return EXIT_USAGE
    try:
        site = site_endpoints(job, run_token())
    except SessionError as exc:
        print_error(errors, exc)
        return EXIT_USAGE
    if site is None:
        errors.print("[red]error:[/] the job names no site to deliver to", highlight=False)
        return EXIT_USAGE
    outbox = Outbox(run_id=str(job.run_id), spool_dir=args.workdir / SPOOL, site=site)
    outbox.start()
    delivery = outbox.close(drain_timeout=args.drain_timeout)
    console.print(f"delivered {delivery.delivered}, still pending {delivery.pending}")
    return EXIT_UNDELIVERED if delivery.pending else 0
