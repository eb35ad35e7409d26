"""The flag tables of the vLLM versions Benchsite supports: every option ``vllm serve``
accepts in that version, read from that version's own argument parser and checked in as
``vllm-<version>.json`` (``python -m agents.protocol.flag_tables.generate`` writes one).

Guarantees: ``SUPPORTED_VLLM_VERSIONS`` lists the versions with a table, oldest first;
``flag_table`` answers for any version (the table of the newest supported version at or below
it, the oldest for an older one, the newest when the version is unknown) and says which table
that was; ``flag_history`` says in which tables a flag appears, so a refusal can say whether a
flag is new, dropped or unknown. The tables are data: a malformed file fails at import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from agents.protocol.versions import VersionKey, parse_vllm_version

_HERE = Path(__file__).resolve().parent
_ACTIONS = (
    "store",
    "append",
    "store_true",
    "store_false",
    "store_const",
    "count",
    "boolean_optional",
)
_TYPES = ("int", "float", "str", "bool", "json", "none")


@dataclass(frozen=True)
class TableFlag:
    """One option of ``vllm serve`` as its version's parser defines it. ``name`` is the grid
    key (the long option without ``--``, ``-`` as ``_``); ``type`` is ``none`` for a switch
    (an action that takes no value)."""

    name: str
    option: str
    type: str
    action: str
    help: str
    choices: tuple | None = None
    default: object = field(default=None, compare=False)  # may be a list: not hashed
    nargs: str | int | None = None
    aliases: tuple[str, ...] = ()

    @property
    def negative_option(self) -> str | None:
        """``--no-x`` for a ``BooleanOptionalAction``, else None."""
        return "--no-" + self.option[2:] if self.action == "boolean_optional" else None


@dataclass(frozen=True)
class FlagTable:
    """The options of one vLLM version, by grid key, in the parser's order."""

    vllm_version: str
    source: str
    flags: dict[str, TableFlag]


def _load(path: Path) -> FlagTable:
    data = json.loads(path.read_text())
    flags: dict[str, TableFlag] = {}
    for entry in data["flags"]:
        flag = TableFlag(
            name=entry["name"],
            option=entry["option"],
            type=entry["type"],
            action=entry["action"],
            help=entry.get("help", ""),
            choices=None if entry.get("choices") is None else tuple(entry["choices"]),
            default=entry.get("default"),
            nargs=entry.get("nargs"),
            aliases=tuple(entry.get("aliases", ())),
        )
        if flag.action not in _ACTIONS or flag.type not in _TYPES:
            raise ValueError(f"{path.name}: {flag.name}: unknown action or type")
        if flag.option != "--" + flag.name.replace("_", "-"):
            raise ValueError(f"{path.name}: {flag.name} does not name {flag.option}")
        flags.setdefault(flag.name, flag)
    version = data["vllm_version"]
    if path.name != f"vllm-{version}.json":
        raise ValueError(f"{path.name} holds the table of vLLM {version}")
    parse_vllm_version(version)
    return FlagTable(vllm_version=version, source=data["source"], flags=flags)


@cache
def _tables() -> tuple[FlagTable, ...]:
    tables = [_load(path) for path in _HERE.glob("vllm-*.json")]
    return tuple(sorted(tables, key=lambda table: parse_vllm_version(table.vllm_version)))


def supported_vllm_versions() -> tuple[str, ...]:
    """The versions with a checked-in table, oldest first."""
    return tuple(table.vllm_version for table in _tables())


SUPPORTED_VLLM_VERSIONS = supported_vllm_versions()


def flag_table(version: VersionKey | None) -> FlagTable:
    """The table a grid for ``version`` is checked against (see the module docstring)."""
    tables = _tables()
    if version is None:
        return tables[-1]
    below = [t for t in tables if parse_vllm_version(t.vllm_version) <= version]
    return below[-1] if below else tables[0]


def flag_history(name: str) -> list[str]:
    """The supported versions whose table has ``name``, oldest first."""
    return [table.vllm_version for table in _tables() if name in table.flags]


@cache
def all_flag_names() -> frozenset[str]:
    """Every grid key some supported version knows."""
    return frozenset(name for table in _tables() for name in table.flags)


def any_table_flag(name: str) -> TableFlag | None:
    """``name`` as the newest table that has it defines it, or None."""
    for table in reversed(_tables()):
        if name in table.flags:
            return table.flags[name]
    return None
