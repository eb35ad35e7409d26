"""Checking serve grids and configurations against the flags a vLLM version knows, and
expanding a grid into its configurations.

Guarantees:

- Everything that accepts, expands or renders a serve configuration goes through these
  checks, so the site refuses exactly what the agent could not run. A flag is accepted when
  the version's generated flag table (``flag_tables``) has it; the hand-kept ones
  (``serve_flag_table.SERVE_FLAGS``: parallelism, memory, quantization …) are checked for
  their meaning as well, and so is ``speculative_config`` (``speculative``). An unknown
  flag is refused naming the version and the nearest flag it knows; a flag of another
  version is refused saying when it came or went.
- Validation is strict and complete: a boolean is not a number, ``"8"`` is not ``8``, and
  every problem is reported at once as a ``FieldError`` whose ``field`` is a path relative to
  the grid (``max_num_seqs[1]``).
"""

from __future__ import annotations

import difflib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

from agents.protocol.errors import FieldError, ServeGridError, got_value, json_literal
from agents.protocol.flag_tables import (
    FlagTable,
    TableFlag,
    all_flag_names,
    any_table_flag,
    flag_history,
    flag_table,
)
from agents.protocol.serve_flag_table import SERVE_FLAGS, FlagSpec
from agents.protocol.speculative import check_speculative_config
from agents.protocol.versions import VersionKey, parse_vllm_version


def _version_key_or_none(vllm_version: str | None) -> VersionKey | None:
    return None if vllm_version is None else parse_vllm_version(vllm_version)


# Room for a CLI spelling of the longest flag and a typo or two.
_FLAG_NAME_MAX_CHARS = 2 * max(len(name) for name in {*SERVE_FLAGS, *all_flag_names()})

MAX_GRID_TRIALS = 64
# Distinct flags one grid may name (each with at least one value).
MAX_GRID_FLAGS = 64
# The longest text a string-valued flag takes (a chat template's path, a JSON config).
MAX_TEXT_VALUE_CHARS = 4000

# Flags the agent sets itself, or that a grid must not set: each with why.
RESERVED_FLAGS: dict[str, str] = {
    **dict.fromkeys(
        ("model", "host", "port", "served_model_name", "revision", "uds", "headless"),
        "Benchsite sets it for every trial",
    ),
    "trust_remote_code": "set trust_remote_code on the experiment (it is audited), not in the grid",
    **dict.fromkeys(
        ("enable_lora", "lora_modules"),
        "name LoRA adapters on the experiment (lora_adapters): they are downloaded with the "
        "weights and requests are spread over them",
    ),
    "api_key": "the agent talks to vLLM without a key",
    "config": "a grid names its flags; a config file is not sent to the pod",
    "download_dir": "the agent downloads the weights into its own cache",
    "disable_log_stats": "Benchsite reads vLLM's statistics",
    "root_path": "the agent calls vLLM's API at its own paths",
    **dict.fromkeys(
        ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs"), "the agent talks plain HTTP to vLLM"
    ),
    "hf_token": "the organization's Hugging Face token travels apart from the grid",
    "tokenizer": "the agent downloads only the model's own tokenizer",
    "tokenizer_revision": "the agent downloads only the model's own tokenizer",
}

# Text or JSON flags whose values mean more than their syntax: each one's own check, which
# answers the normalised value (or None) and its field errors.
_VALUE_MEANING = {"speculative_config": check_speculative_config}

_SEE_SCHEMA = "; see the serve-flag schema for the flags Benchsite can vary"
# A sentinel for "this value was refused" (None is a legitimate choice value).
_REFUSED = object()


@dataclass(frozen=True)
class _Lookup:
    """What a grid key means for a version: the spec to check its values with (None when
    they cannot be checked), and why the flag cannot be used (None when it can)."""

    spec: FlagSpec | None
    problem: str | None = None


def _flag_available(spec: FlagSpec, version: VersionKey | None) -> str | None:
    """Why the hand-kept ``spec`` cannot be used with ``version``, or None when it can."""
    if version is None:
        return None
    if spec.since is not None and version < parse_vllm_version(spec.since):
        return f"{spec.cli} needs vLLM {spec.since} or later"
    if spec.removed_in is not None and version >= parse_vllm_version(spec.removed_in):
        successor = f"; use {spec.renamed_to} instead" if spec.renamed_to else ""
        return f"{spec.cli} was removed in vLLM {spec.removed_in}{successor}"
    return None


@cache
def _table_spec(flag: TableFlag) -> FlagSpec:
    """A flag of a generated table as a spec: its type and choices, no range."""
    if flag.type == "none":  # a switch: true gives the option, false leaves it out
        return FlagSpec(
            name=flag.name,
            kind="bool",
            cli=flag.option,
            help=flag.help,
            negative_cli=flag.negative_option,
        )
    multiple = None
    if flag.action == "append":
        multiple = "append"
    elif flag.nargs not in (None, "?"):
        multiple = "nargs"
    # A "bool" that takes a value (``type=bool``) is text to argparse: any word but "" is true.
    kind = {"int": "int", "float": "float", "json": "json"}.get(flag.type, "str")
    choices = flag.choices
    if choices is not None and kind == "str":
        kind = "choice"
    if kind in ("int", "float") and choices is not None:
        choices = tuple(c for c in choices if isinstance(c, int | float))
    return FlagSpec(
        name=flag.name,
        kind=kind,
        cli=flag.option,
        help=flag.help,
        choices=choices if kind in ("int", "choice") else None,
        multiple=multiple,
    )


def _shown(version_text: str, table: FlagTable) -> str:
    if parse_vllm_version(version_text) == parse_vllm_version(table.vllm_version):
        return f"vLLM {version_text}"
    return f"vLLM {version_text} (flag table of {table.vllm_version})"


def _nearest(text: str, names, otherwise: str = "") -> str:
    close = difflib.get_close_matches(text, sorted(names), n=3, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else otherwise


def _lookup_flag(name: object, vllm_version: str | None) -> _Lookup:
    """What grid key ``name`` means for ``vllm_version`` (None: unknown, any version's flag)."""
    text = name if isinstance(name, str) else repr(name)
    if len(text) > _FLAG_NAME_MAX_CHARS:
        # No flag is this long: no suggestion to look for, and the name is not echoed.
        return _Lookup(
            None,
            f"unknown serve flag: a name of {len(text):,} characters"
            f" (no vLLM flag is longer than {_FLAG_NAME_MAX_CHARS // 2})",
        )
    if text in RESERVED_FLAGS:
        return _Lookup(None, f"not a grid flag: {RESERVED_FLAGS[text]}")
    version = _version_key_or_none(vllm_version)
    spec = SERVE_FLAGS.get(text)
    if version is None:
        if spec is None and (flag := any_table_flag(text)) is not None:
            spec = _table_spec(flag)
        if spec is not None:
            return _Lookup(spec)
        hint = _nearest(_normalised(text), _known(), _SEE_SCHEMA)
        return _Lookup(None, f"unknown serve flag{hint}")
    table = flag_table(version)
    if spec is not None and (problem := _flag_available(spec, version)):
        return _Lookup(spec, problem)
    if text in table.flags:
        return _Lookup(spec or _table_spec(table.flags[text]))
    shown = _shown(vllm_version, table)
    history = flag_history(text)
    option = "--" + text.replace("_", "-")
    hint = _nearest(text, table.flags)
    if not history:
        hint = _nearest(_normalised(text), table.flags, " (see its `vllm serve --help`)")
        return _Lookup(None, f"unknown serve flag: {shown} has no such flag{hint}")
    newer = [v for v in history if parse_vllm_version(v) > parse_vllm_version(table.vllm_version)]
    older = [v for v in history if parse_vllm_version(v) < parse_vllm_version(table.vllm_version)]
    if older:
        message = f"{option} was removed after vLLM {older[-1]}: {shown} has no such flag{hint}"
    else:
        message = f"{option} needs vLLM {newer[0]} or later: {shown} has no such flag{hint}"
    return _Lookup(spec, message)


def _normalised(text: str) -> str:
    # Users paste CLI spellings ("--max-num-seqs"): suggest on the grid key's spelling.
    return text.lstrip("-").replace("-", "_")


@cache
def _known() -> frozenset[str]:
    return frozenset({*SERVE_FLAGS, *all_flag_names()} - set(RESERVED_FLAGS))


def _flag_order(names) -> list[str]:
    """Hand-kept flags in ``SERVE_FLAGS`` order, then the others by name: the order of a
    normalised grid, of its configurations and of a command line."""
    return [n for n in SERVE_FLAGS if n in names] + sorted(n for n in names if n not in SERVE_FLAGS)


def _value_key(value: object) -> str:
    # Values may be lists or objects (a flag of several values, a JSON config): compare
    # them by their canonical JSON.
    return json.dumps(value, sort_keys=True)


def _check_value(
    spec: FlagSpec,
    value: object,
    path: str,
    version: VersionKey | None,
    errors: list[FieldError],
) -> object:
    """Returns the normalised value, or ``_REFUSED`` after recording why in ``errors``."""
    if spec.multiple is None:
        return _check_one(spec, value, path, version, errors)
    if not isinstance(value, list | tuple) or not value:
        errors.append(FieldError(path, f"expected a non-empty list of values, {got_value(value)}"))
        return _REFUSED
    if len(value) > MAX_GRID_TRIALS:
        errors.append(FieldError(path, f"at most {MAX_GRID_TRIALS} items; got {len(value)}"))
        return _REFUSED
    items = [
        _check_one(spec, item, f"{path}[{i}]", version, errors) for i, item in enumerate(value)
    ]
    return _REFUSED if any(item is _REFUSED for item in items) else items


def _check_text(spec: FlagSpec, value: object, got: str) -> str | None:
    """Why ``value`` is no text value of a ``str`` or ``json`` flag, or None."""
    if spec.kind == "json" and isinstance(value, dict | list):
        if len(json.dumps(value)) > MAX_TEXT_VALUE_CHARS:
            return f"at most {MAX_TEXT_VALUE_CHARS} characters of JSON"
        return None
    if not isinstance(value, str):
        expected = "an object, array or string" if spec.kind == "json" else "a string"
        return f"expected {expected}, {got}"
    if not value.strip() or len(value) > MAX_TEXT_VALUE_CHARS:
        return f"expected 1 to {MAX_TEXT_VALUE_CHARS} characters"
    if value.startswith("-"):
        # vLLM's parser would read it as another option.
        return f"must not start with '-'; got {json_literal(value)}"
    return None


def _check_one(
    spec: FlagSpec,
    value: object,
    path: str,
    version: VersionKey | None,
    errors: list[FieldError],
) -> object:
    """One value (or one item of a list-valued flag's value), as ``_check_value`` answers."""

    def refuse(message: str) -> object:
        errors.append(FieldError(path, message))
        return _REFUSED

    got = got_value(value)
    if spec.kind in ("str", "json"):
        problem = _check_text(spec, value, got)
        if problem:
            return refuse(problem)
        if spec.name in _VALUE_MEANING:
            checked, problems = _VALUE_MEANING[spec.name](value, path, version)
            errors.extend(problems)
            return _REFUSED if checked is None else checked
        return value
    if spec.kind == "bool":
        if not isinstance(value, bool):
            return refuse(f"expected true or false, {got}")
        if (
            not value
            and spec.negative_since is not None
            and version is not None
            and version < parse_vllm_version(spec.negative_since)
        ):
            return refuse(
                f"false needs vLLM {spec.negative_since} or later ({spec.negative_cli}); "
                f"leave {spec.name} out to keep vLLM's default"
            )
        return value

    if spec.kind == "choice":
        if value is not None and not isinstance(value, str):
            return refuse(f"expected a string, {got}")
        if value not in spec.choices:
            options = ", ".join(json_literal(choice) for choice in spec.choices)
            return refuse(f"must be one of {options}; got {json_literal(value)}")
        return value

    # Numbers. bool is a subclass of int in Python but never a number here.
    if isinstance(value, bool) or not isinstance(value, int | float):
        expected = "an integer" if spec.kind == "int" else "a number"
        return refuse(f"expected {expected}, {got}")
    if spec.kind == "int":
        if not isinstance(value, int):
            return refuse(f"expected an integer, {got}")
    else:
        if not math.isfinite(value):
            return refuse(f"expected a finite number, got {value}")
        value = float(value)  # 1 and 1.0 are the same setting; store one spelling
    if spec.choices is not None and value not in spec.choices:
        options = ", ".join(json_literal(choice) for choice in spec.choices)
        return refuse(f"must be one of {options}; got {value}")
    unit = f" {spec.unit}" if spec.unit else ""
    if spec.minimum is not None:
        if spec.exclusive_minimum and value <= spec.minimum:
            return refuse(f"must be greater than {spec.minimum}{unit}; got {value}")
        if value < spec.minimum:
            return refuse(f"must be at least {spec.minimum}{unit}; got {value}")
    if spec.maximum is not None and value > spec.maximum:
        return refuse(f"must be at most {spec.maximum}{unit}; got {value}")
    return value


def validate_serve_grid(
    grid: Mapping[str, object],
    *,
    gpu_count: int,
    max_context: int | None = None,
    max_trials: int = MAX_GRID_TRIALS,
    vllm_version: str | None = None,
    num_experts: int | None = None,
) -> dict[str, list]:
    """Checks a serve grid and returns it normalised, or raises ``ServeGridError``.

    A grid maps a flag name (a ``vllm serve`` option without ``--``, ``-`` as ``_``) to a
    non-empty list of distinct values; the run tries every combination. ``{}`` is valid: one
    trial with vLLM's defaults.

    Every problem is reported, each on its own path: flags the version does not know (with
    the nearest it does, or when the flag came or went) and flags Benchsite sets itself, a
    scalar or empty list where a list is expected, values of the wrong JSON type (no
    coercion: ``true`` is not ``1`` and ``"8"`` is not ``8``; an integer is accepted for a
    number flag), values out of range or not among the choices, duplicates, a ``false`` the
    version cannot say, the parallelism rules (``_check_parallelism``), ``max_model_len``
    above ``max_context``, and more than ``max_trials`` combinations (path ``""``).

    ``vllm_version=None`` means the version is unknown: any supported version's flags, no
    version checks, and flags render in their newest form. ``num_experts`` is the model's
    routed experts (0: a dense model; None: not known, expert parallelism not checked
    against the model). The result lists flags in ``_flag_order`` with number values as
    ``float``. Raises plain ``ValueError`` (not ``ServeGridError``) for a bad ``gpu_count``,
    ``max_trials`` or ``vllm_version``, which are the caller's to get right.
    """
    if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 1:
        raise ValueError(f"gpu_count must be a positive integer, got {gpu_count!r}")
    if isinstance(max_trials, bool) or not isinstance(max_trials, int) or max_trials < 1:
        raise ValueError(f"max_trials must be a positive integer, got {max_trials!r}")
    version = _version_key_or_none(vllm_version)
    if not isinstance(grid, Mapping):
        raise ServeGridError(
            [FieldError("", "expected an object mapping serve flags to lists of values")]
        )

    if len(grid) > MAX_GRID_FLAGS:
        # More keys than a grid may vary: naming each would cost as much as the grid is large.
        raise ServeGridError(
            [FieldError("", f"at most {MAX_GRID_FLAGS} flags; got {len(grid)} keys")]
        )
    errors: list[FieldError] = []
    normalised: dict[str, list] = {}
    # Values that passed their own checks, with their index, for the cross-flag rules.
    accepted: dict[str, list[tuple[int, object]]] = {}
    trials = 1
    sizes: list[str] = []
    for name, values in grid.items():
        found = _lookup_flag(name, vllm_version)
        if found.problem:
            errors.append(FieldError(_key_path(name), found.problem))
        spec = found.spec
        if spec is None:
            continue
        if not isinstance(values, list | tuple):
            errors.append(
                FieldError(
                    name,
                    f"expected a list of values, e.g. [{json_literal(values)}]; {got_value(values)}"
                    if isinstance(values, str | int | float)
                    else f"expected a list of values; {got_value(values)}",
                )
            )
            continue
        if not values:
            errors.append(
                FieldError(
                    name, "expected at least one value; leave the flag out to keep vLLM's default"
                )
            )
            continue
        trials *= len(values)
        sizes.append(f"{name} {len(values)}")
        if len(values) > max_trials:
            # Longer than the whole grid may be: the size error below says so, and the
            # values are not checked one by one, however many there are.
            continue
        good: list[tuple[int, object]] = []
        first_index: dict[str, int] = {}
        for index, raw in enumerate(values):
            path = f"{name}[{index}]"
            value = _check_value(spec, raw, path, version, errors)
            if value is _REFUSED:
                continue
            key = _value_key(value)
            if key in first_index:
                errors.append(
                    FieldError(
                        path, f"duplicate of {name}[{first_index[key]}] ({json_literal(value)})"
                    )
                )
                continue
            first_index[key] = index
            good.append((index, value))
        accepted[name] = good
        normalised[name] = [value for _, value in good]

    _check_parallelism(accepted, gpu_count, num_experts, errors)
    if max_context is not None:
        for index, length in accepted.get("max_model_len", []):
            if length > max_context:
                errors.append(
                    FieldError(
                        f"max_model_len[{index}]",
                        f"{length} is above the model's context length ({max_context})",
                    )
                )
    if trials > max_trials:
        errors.append(
            FieldError(
                "",
                f"the grid expands to {trials} trials ({' x '.join(sizes)}); "
                f"at most {max_trials} are allowed",
            )
        )
    if errors:
        raise ServeGridError(errors)
    return {name: normalised[name] for name in _flag_order(normalised)}


def _key_path(name: object) -> str:
    # A name longer than any flag is not echoed in the path: the error is the grid's.
    text = name if isinstance(name, str) else repr(name)
    return text if len(text) <= _FLAG_NAME_MAX_CHARS else ""


# The GPUs a configuration occupies: vLLM's world size across data parallel ranks is
# TP x PP x DP (``ParallelConfig.world_size_across_dp``), in the order the rule names them.
_GPU_AXES = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size")


def _check_parallelism(
    accepted: Mapping[str, list[tuple[int, object]]],
    gpu_count: int,
    num_experts: int | None,
    errors: list[FieldError],
) -> None:
    """The rules between parallelism flags, over every combination the grid makes:

    - TP x PP x DP GPUs fit the experiment's ``gpu_count``. The grid is a full cartesian
      product, so each value of the first varied axis is checked with the *largest* value of
      the others, and refused on that value's path;
    - ``decode_context_parallel_size`` divides every ``tensor_parallel_size`` (vLLM asserts
      ``tp_size % dcp_size == 0`` when it builds its engine config: DCP splits the TP group);
    - ``enable_expert_parallel`` true needs a mixture-of-experts model and TP x DP > 1 in
      every combination (vLLM's fused MoE layer uses expert parallelism only then, and
      otherwise silently runs without it).
    """
    widest = {
        axis: max((size for _, size in accepted.get(axis, [])), default=1) for axis in _GPU_AXES
    }
    varied = [axis for axis in _GPU_AXES if accepted.get(axis)]
    if varied:
        axis = varied[0]
        others = [a for a in _GPU_AXES if a != axis and widest[a] > 1]
        for index, size in accepted[axis]:
            needed = size * math.prod(widest[a] for a in others)
            if needed > gpu_count:
                combined = "".join(f" x {a} {widest[a]}" for a in others)
                errors.append(
                    FieldError(
                        f"{axis}[{index}]",
                        f"{axis} {size}{combined} needs {needed} GPUs; "
                        f"the experiment has {gpu_count}",
                    )
                )
    tensor_sizes = [size for _, size in accepted.get("tensor_parallel_size", [])] or [1]
    for index, dcp in accepted.get("decode_context_parallel_size", []):
        bad = [tp for tp in tensor_sizes if tp % dcp]
        if bad:
            errors.append(
                FieldError(
                    f"decode_context_parallel_size[{index}]",
                    f"decode_context_parallel_size {dcp} must divide tensor_parallel_size "
                    f"(vLLM splits each tensor parallel group into decode context groups); "
                    f"tensor_parallel_size {bad[0]} is not a multiple of {dcp}",
                )
            )
    smallest_tp = min(tensor_sizes)
    smallest_dp = min((size for _, size in accepted.get("data_parallel_size", [])), default=1)
    for index, enabled in accepted.get("enable_expert_parallel", []):
        if not enabled:
            continue
        path = f"enable_expert_parallel[{index}]"
        if num_experts is not None and num_experts < 1:
            errors.append(
                FieldError(
                    path,
                    "expert parallelism needs a mixture-of-experts model; this model has no "
                    "experts (num_experts in its config)",
                )
            )
        if smallest_tp * smallest_dp <= 1:
            errors.append(
                FieldError(
                    path,
                    "expert parallelism needs tensor_parallel_size x data_parallel_size above 1 "
                    f"in every configuration; the grid has {smallest_tp} x {smallest_dp}",
                )
            )


def expand_serve_grid(grid: Mapping[str, list]) -> list[dict[str, object]]:
    """Lists every serve configuration of a (validated) grid, in a stable order.

    Flags are taken in ``_flag_order`` whatever the mapping's key order (a grid read back
    from a JSON column may come back reordered), values in list order, and the first flag
    varies slowest, so trial ``i`` of a stored grid is always the same configuration. ``{}``
    gives ``[{}]``: one trial with vLLM's defaults. Values are not re-checked; a flag no
    supported version knows raises ``ServeGridError``.
    """
    errors = [
        FieldError(_key_path(name), found.problem)
        for name in grid
        if (found := _lookup_flag(name, None)).problem
    ]
    if errors:
        raise ServeGridError(errors)
    names = _flag_order(grid)
    return [
        dict(zip(names, combination, strict=True))
        for combination in itertools.product(*(grid[name] for name in names))
    ]


def trial_configs(grid: Mapping[str, list], *, defaults_trial: bool = False) -> list[dict]:
    """The serve configurations a run of this grid measures, in trial order: the grid's
    (``expand_serve_grid``), then, with ``defaults_trial``, one with vLLM's defaults (``{}``)
    unless the grid already has it: the baseline every answer is compared with."""
    configs = expand_serve_grid(grid)
    if defaults_trial and {} not in configs:
        configs.append({})
    return configs


def check_serve_config(
    config: Mapping[str, object], *, vllm_version: str | None = None
) -> dict[str, object]:
    """One serve configuration (flag name -> single value), checked with the same rules as
    a grid value and normalised, in ``_flag_order``; raises ``ServeGridError`` with paths
    equal to the flag names."""
    return {spec.name: value for spec, value in checked_serve_flags(config, vllm_version)}


def checked_serve_flags(
    config: Mapping[str, object], vllm_version: str | None
) -> list[tuple[FlagSpec, object]]:
    """``check_serve_config`` with each flag's spec, for rendering."""
    version = _version_key_or_none(vllm_version)
    errors: list[FieldError] = []
    values: dict[str, tuple[FlagSpec, object]] = {}
    for name, raw in config.items():
        found = _lookup_flag(name, vllm_version)
        if found.problem:
            errors.append(FieldError(_key_path(name), found.problem))
        if found.spec is None:
            continue
        single = found.spec.multiple is None and found.spec.kind != "json"
        if single and isinstance(raw, list | tuple | Mapping):
            errors.append(FieldError(name, f"expected a single value, {got_value(raw)}"))
            continue
        value = _check_value(found.spec, raw, name, version, errors)
        if value is not _REFUSED:
            values[name] = (found.spec, value)
    if errors:
        raise ServeGridError(errors)
    return [values[name] for name in _flag_order(values)]
