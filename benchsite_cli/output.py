"""What the ``benchsite`` command writes: the token-masking streams, a line on stdout or
stderr, plain aligned tables (readable in a CI log and with ``grep``) and YAML documents.

Guarantees: once ``main`` has wrapped ``sys.stdout`` and ``sys.stderr`` in ``Redacting``,
nothing written through them shows the token.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

import yaml

from benchsite_cli.client import ApiClient


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


def out(*parts: Any) -> None:
    print(*parts, file=sys.stdout, flush=True)


def err(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def dollars(amount: Any) -> str:
    """An API amount (a decimal string) as ``$1.23``; ``unknown`` where the API sends null (a
    run of an existing endpoint without a price: nothing was priced, so never ``$0``)."""
    return "unknown" if amount is None else f"${amount}"


def print_list(api: ApiClient, path: str, columns: dict[str, Callable[[dict], Any]]) -> None:
    """Every row of a list endpoint as a table, one column per ``{header: value of a row}``."""
    rows = [tuple(str(value(row)) for value in columns.values()) for row in api.list_all(path)]
    table(tuple(columns), rows)


def print_yaml(document: dict[str, Any]) -> None:
    out(yaml.safe_dump(document, sort_keys=False, allow_unicode=True).rstrip())


def table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """A plain, aligned table (readable in a CI log and with ``grep``)."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    for line in (headers, *rows):
        cells = (str(cell).ljust(width) for cell, width in zip(line, widths, strict=True))
        out("  ".join(cells).rstrip())
