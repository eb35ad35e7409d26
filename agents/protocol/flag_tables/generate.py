"""Writes the flag table of the vLLM this Python imports: every option of ``vllm serve``'s own
argument parser, as JSON (``agents/protocol/flag_tables/vllm-<version>.json``).

Run it inside a vLLM install (its virtualenv or its image)::

    python -m agents.protocol.flag_tables.generate            # writes vllm-<version>.json
    python -m agents.protocol.flag_tables.generate --stdout   # prints it

It builds the parser exactly as ``vllm serve`` does (``make_arg_parser``, of
``vllm.entrypoints.openai.cli_args`` or, in later versions, ``…launchers.cli_args``, on vLLM's
``FlexibleArgumentParser``) and records, per
option: its name (the grid key), its option strings, a type label, choices, default, nargs,
action and the first line of its help. It imports only vLLM and the standard library, so it
runs in any vLLM install without Benchsite's dependencies.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import re
import sys
from pathlib import Path

FORMAT = 1
# A default or help line longer than this is cut: the table is for reading and checking.
_MAX_TEXT = 300
_HERE = Path(__file__).resolve().parent

# argparse's actions that take no value on the command line, by the label the table uses.
_SWITCH_ACTIONS = {
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_CountAction": "count",
    "BooleanOptionalAction": "boolean_optional",
}


def _parser_factory():
    """vLLM's ``FlexibleArgumentParser`` (moved between modules across versions)."""
    for module in ("vllm.utils.argparse_utils", "vllm.utils"):
        try:
            return importlib.import_module(module).FlexibleArgumentParser
        except (ImportError, AttributeError):
            continue
    raise SystemExit("no FlexibleArgumentParser in this vLLM")


# Where ``make_arg_parser`` (the function ``vllm serve`` builds its parser with) lives: it
# moved from the OpenAI frontend to the launchers; ``cli.serve`` imports it in every version.
_MAKE_ARG_PARSER_MODULES = (
    "vllm.entrypoints.openai.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.cli.serve",
)


def serve_parser() -> argparse.ArgumentParser:
    """``vllm serve``'s parser, built as the CLI builds it."""
    failures = []
    for module in _MAKE_ARG_PARSER_MODULES:
        try:
            make_arg_parser = importlib.import_module(module).make_arg_parser
        except (ImportError, AttributeError) as exc:
            failures.append(f"{module}: {type(exc).__name__}: {exc}")
            continue
        return make_arg_parser(_parser_factory()(prog="vllm serve"))
    raise SystemExit("no make_arg_parser in this vLLM:\n" + "\n".join(failures))


def _wrapped(kind: object, depth: int = 0) -> list[object]:
    """``kind`` and what its closures hold, a few levels deep: vLLM wraps its types
    (``optional_type(json.loads)``, ``parse_type(…)``)."""
    found = [kind]
    if depth < 3:
        for cell in getattr(kind, "__closure__", None) or ():
            try:
                found += _wrapped(cell.cell_contents, depth + 1)
            except ValueError:  # an empty cell
                continue
    return found


def _type_label(action: argparse.Action) -> str:
    """``int``, ``float``, ``str``, ``json`` or ``none`` (a switch): what a value must be."""
    if type(action).__name__ in _SWITCH_ACTIONS:
        return "none"
    if action.type is None:
        return "str"
    seen = _wrapped(action.type)
    names = [getattr(kind, "__name__", "") for kind in seen]
    # A JSON document: json.loads, a config dataclass parsed from JSON, a dict-or-text.
    if any(name == "loads" or "dataclass" in name or "dict" in name for name in names):
        return "json"
    for kind in seen:
        if kind in (int, float, str):
            return kind.__name__
    if any("int" in name for name in names):  # human_readable_int: "1k", "2M" or digits
        return "int"
    return "str"


def _jsonable(value: object) -> object:
    if value is argparse.SUPPRESS:
        return None
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return _clip(repr(value))
    return value if len(text) <= _MAX_TEXT else _clip(text)


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def _first_line(text: str | None) -> str:
    text = (text or "").strip()
    line = re.split(r"\n\s*\n|(?<=\.)\s+(?=[A-Z<`])", text, maxsplit=1)[0]
    return _clip(" ".join(line.split()))


def flag_entries(parser: argparse.ArgumentParser) -> list[dict]:
    """Every optional argument of ``parser`` but ``--help``, in the parser's order."""
    entries = []
    for action in parser._actions:  # argparse keeps no public list of its actions
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        long_options = [o for o in action.option_strings if o.startswith("--")]
        positive = [o for o in long_options if not o.startswith("--no-")] or long_options
        option = positive[0]
        action_name = _SWITCH_ACTIONS.get(type(action).__name__, "store")
        if type(action).__name__ == "_AppendAction":
            action_name = "append"
        entries.append(
            {
                "name": option[2:].replace("-", "_"),
                "option": option,
                "aliases": [o for o in action.option_strings if o != option],
                "dest": action.dest,
                "type": _type_label(action),
                "choices": None
                if action.choices is None
                else [_jsonable(choice) for choice in action.choices],
                "default": _jsonable(action.default),
                "nargs": action.nargs if isinstance(action.nargs, str | int) else None,
                "action": action_name,
                "help": _first_line(action.help if action.help != argparse.SUPPRESS else ""),
            }
        )
    return entries


def installed_vllm_version() -> str:
    """The release of the vLLM imported here, without a local tag (``0.32.0+cpu`` → ``0.32.0``)."""
    import vllm

    version = getattr(vllm, "__version__", None) or importlib.metadata.version("vllm")
    return version.split("+", 1)[0]


def table(*, source: str | None = None) -> dict:
    # vLLM reads its options' help from its config classes' docstrings only when the command
    # line asks for help (``NEEDS_HELP`` in ``vllm.engine.arg_utils``), and leaves ``--model``
    # out of ``vllm serve --help``: "--help" without "serve" gives every option its help.
    sys.argv = [sys.argv[0], "--help"]
    version = installed_vllm_version()
    return {
        "format": FORMAT,
        "vllm_version": version,
        "source": source
        or (
            f"generated by `python -m agents.protocol.flag_tables.generate` from vLLM {version}'s "
            "own parser (make_arg_parser, as `vllm serve` builds it)"
        ),
        "flags": flag_entries(serve_parser()),
    }


def main(argv: list[str] | None = None) -> int:
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--stdout", action="store_true", help="print instead of writing the file")
    cli.add_argument("--source", help="how the table was made, recorded in its header")
    cli.add_argument("--out-dir", type=Path, default=_HERE)
    args = cli.parse_args(argv)
    data = table(source=args.source)
    text = json.dumps(data, indent=1, ensure_ascii=False) + "\n"
    if args.stdout:
        sys.stdout.write(text)
    else:
        path = args.out_dir / f"vllm-{data['vllm_version']}.json"
        path.write_text(text)
        print(f"{path}: {len(data['flags'])} flags")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
