"""The serve-flag table rendered: the ``vllm serve`` argv of one configuration, and the
JSON Schema of a grid for publishing.

Guarantees: ``serve_args`` checks before it renders (``serve_flags.checked_serve_flags``)
and returns an argv list, never a shell string.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from agents.protocol.flag_tables import SUPPORTED_VLLM_VERSIONS
from agents.protocol.serve_flag_table import (
    SERVE_FLAGS,
    SERVE_FLAGS_SCHEMA_VERSION,
    FlagSpec,
)
from agents.protocol.serve_flags import MAX_GRID_TRIALS, checked_serve_flags


def serve_args(config: Mapping[str, object], *, vllm_version: str | None = None) -> list[str]:
    """The ``vllm serve`` arguments for one serve configuration, as an argv list.

    ``config`` maps flag names to single values (one element of ``expand_serve_grid``). The
    values are checked with the same rules as a grid value (raising ``ServeGridError`` with
    paths equal to the flag names) before anything is rendered. Flags come out in
    ``SERVE_FLAGS`` order, then the version's other flags by name; numbers as decimal text;
    ``true`` as the flag, ``false`` as its negative form or, for a flag without one,
    nothing; a ``null`` choice as nothing; a list after one option (``nargs``) or each after
    its own (``append``); a JSON object or array as compact JSON.
    """
    argv: list[str] = []
    for spec, value in checked_serve_flags(config, vllm_version):
        if spec.kind == "bool":
            if value:
                argv.append(spec.cli)
            elif spec.negative_cli:
                argv.append(spec.negative_cli)
        elif spec.multiple == "append":
            for item in value:
                argv.extend([spec.cli, _text(item)])
        elif spec.multiple == "nargs":
            argv.extend([spec.cli, *(_text(item) for item in value)])
        elif value is not None:
            argv.extend([spec.cli, _text(value)])
    return argv


def _text(value: object) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    # repr() of a float is the shortest text that parses back to the same float.
    return repr(value) if isinstance(value, float) else str(value)


def _flag_item_schema(spec: FlagSpec) -> dict:
    if spec.kind == "bool":
        return {"type": "boolean"}
    if spec.kind == "choice":
        types = ["string", "null"] if None in spec.choices else ["string"]
        return {"type": types, "enum": list(spec.choices)}
    item: dict = {"type": "integer" if spec.kind == "int" else "number"}
    if spec.choices is not None:
        item["enum"] = list(spec.choices)
    if spec.minimum is not None:
        item["exclusiveMinimum" if spec.exclusive_minimum else "minimum"] = spec.minimum
    if spec.maximum is not None:
        item["maximum"] = spec.maximum
    return item


def serve_flags_json_schema(*, max_trials: int = MAX_GRID_TRIALS) -> dict:
    """A JSON Schema (2020-12) for a serve grid, plus the flag table, for publishing.

    ``properties`` validates the shape of a grid's hand-kept flags (value types, ranges,
    choices, unique non-empty lists); any other key is a flag of the experiment's vLLM
    version, whose flag table ``x-vllm-versions`` lists; rules that involve the experiment
    (which flags its version knows, GPU count, context length, grid size) are only in
    ``validate_serve_grid``. ``x-flags`` lists every flag in
    ``SERVE_FLAGS`` order with its ``name``, ``type``, bounds, ``choices``, ``cli`` forms,
    version bounds and ``help``; ``x-max-trials`` echoes the limit the caller enforces. The
    result is plain JSON data and a fresh copy each call.
    """
    properties: dict[str, dict] = {}
    flags: list[dict] = []
    for spec in SERVE_FLAGS.values():
        item = _flag_item_schema(spec)
        properties[spec.name] = {
            "type": "array",
            "items": item,
            "minItems": 1,
            "uniqueItems": True,
            "description": spec.help,
        }
        flags.append(
            {
                "name": spec.name,
                "type": spec.kind,
                "minimum": spec.minimum,
                "maximum": spec.maximum,
                "exclusive_minimum": spec.exclusive_minimum,
                "choices": None if spec.choices is None else list(spec.choices),
                "unit": spec.unit,
                "cli": spec.cli,
                "negative_cli": spec.negative_cli,
                "negative_since": spec.negative_since,
                "since": spec.since,
                "removed_in": spec.removed_in,
                "renamed_to": spec.renamed_to,
                "help": spec.help,
            }
        )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Benchsite serve grid",
        "description": "Lists of vLLM serve flag values; every combination is one trial.",
        "type": "object",
        "additionalProperties": {
            "type": "array",
            "minItems": 1,
            "description": "Any other flag of the experiment's vLLM version (its flag table).",
        },
        "properties": properties,
        "x-vllm-versions": list(SUPPORTED_VLLM_VERSIONS),
        "x-schema-version": SERVE_FLAGS_SCHEMA_VERSION,
        "x-max-trials": max_trials,
        "x-flags": flags,
    }
