"""``benchsite``'s entry point: parse the arguments (``arguments``), connect to the site and
hand the command to its module (``experiments``, ``runs``, ``models``, ``audit``), which
calls the API, prints (``output``) and picks the exit code.

Guarantees: exit 0 on success, 1 when the gate finds a regression beyond a threshold (or
``experiments validate`` finds the draft invalid), 2 on any error, with one clear line on
stderr. The token is never printed: everything written to stdout and stderr passes through a
filter that masks it, ``--verbose`` included. Arguments (thresholds, baseline, files) are
checked before anything is started, so a typo never rents a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchsite_cli import EXIT_ERROR, EXIT_OK
from benchsite_cli.arguments import build_parser
from benchsite_cli.audit import audit_export
from benchsite_cli.client import ApiClient, CliError
from benchsite_cli.experiments import (
    experiments_create,
    experiments_list,
    experiments_show,
    experiments_validate,
)
from benchsite_cli.models import models_list, models_show
from benchsite_cli.output import Redacting, err
from benchsite_cli.runs import runs_cancel, runs_compare, runs_show, runs_start


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
        err(f"error: {exc}")
        for field, messages in exc.fields.items():
            for message in messages:
                err(f"  {field}: {message}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        err("error: interrupted (a started run keeps running; `benchsite runs cancel` stops it)")
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
    log = (lambda line: err(f"· {line}")) if getattr(args, "verbose", False) else None
    api = ApiClient(base_url=url, token=token, org=org, log=log)
    try:
        handler = COMMANDS[(args.group, args.action)]
        return handler(api, args)
    finally:
        api.close()


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
