"""What every ``benchsite-agent`` subcommand shares: its exit codes, the usage error, how an
error line is printed and how a JSON option file is read.

Guarantees: a usage error is one red ``error:`` line naming the option, never a traceback;
its exit code is ``EXIT_USAGE``.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

EXIT_USAGE = 2
EXIT_ENGINE_FAILED = 3
EXIT_INTERRUPTED = 130


class UsageError(ValueError):
    """A command-line value that cannot be used; the message names the option."""


def print_error(errors: Console, problem: object) -> None:
    """One ``error:`` line on ``errors`` (stderr), wrapped as the terminal wants."""
    errors.print(f"[red]error:[/] {problem}", highlight=False, soft_wrap=True)


def read_json_object(option: str, path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{option}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{option}: expected a JSON object")
    return data
