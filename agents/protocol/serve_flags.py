"""Checking serve grids and configurations against the serve-flag table, and expanding a grid
into its configurations.

Guarantees:

- Everything that accepts, expands or renders a serve configuration goes through the table
  (``serve_flag_table.SERVE_FLAGS``) and these checks, so the site refuses exactly what the
  agent could not run.
- Validation is strict and complete: a boolean is not a number, ``"8"`` is not ``8``, and
  every problem is reported at once as a ``FieldError`` whose ``field`` is a path relative to
  the grid (``max_num_seqs[1]``).
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections.abc import Mapping

from agents.protocol.errors import FieldError, ServeGridError, got_value, json_literal
from agents.protocol.serve_flag_table import SERVE_FLAGS, FlagSpec
from agents.protocol.versions import VersionKey, parse_vllm_version


def _version_key_or_none(vllm_version: str | None) -> VersionKey | None:
    return None if vllm_version is None else parse_vllm_version(vllm_version)


# Room for a CLI spelling of the longest flag ("--max-num-batched-tokens") and a typo or two.
_FLAG_NAME_MAX_CHARS = 2 * max(len(name) for name in SERVE_FLAGS)

MAX_GRID_TRIALS = 64

# A sentinel for "this value was refused" (None is a legitimate choice value).
_REFUSED = object()


def _flag_available(spec: FlagSpec, version: VersionKey | None) -> str | None:
    """Why ``spec`` cannot be used with ``version``, or None when it can."""
    if version is None:
        return None
    if spec.since is not None and version < parse_vllm_version(spec.since):
        return f"{spec.cli} needs vLLM {spec.since} or later"
    if spec.removed_in is not None and version >= parse_vllm_version(spec.removed_in):
        successor = f"; use {spec.renamed_to} instead" if spec.renamed_to else ""
        return f"{spec.cli} was removed in vLLM {spec.removed_in}{successor}"
    return None


def _lookup_flag(name: object, errors: list[FieldError]) -> FlagSpec | None:
    if isinstance(name, str) and name in SERVE_FLAGS:
        return SERVE_FLAGS[name]
    text = name if isinstance(name, str) else repr(name)
    if len(text) > _FLAG_NAME_MAX_CHARS:
        # No flag is this long: no suggestion to look for, and only the start is echoed.
        errors.append(FieldError(text[:_FLAG_NAME_MAX_CHARS] + "...", "unknown serve flag"))
        return None
    # Users paste CLI spellings ("--max-num-seqs"): suggest on the normalised name.
    normalised = text.lstrip("-").replace("-", "_")
    close = difflib.get_close_matches(normalised, list(SERVE_FLAGS), n=3, cutoff=0.6)
    if close:
        hint = f"; did you mean {', '.join(close)}?"
    else:
        hint = "; see the serve-flag schema for the flags Benchsite can vary"
    errors.append(FieldError(text, f"unknown serve flag{hint}"))
    return None


def _check_value(
    spec: FlagSpec,
    value: object,
    path: str,
    version: VersionKey | None,
    errors: list[FieldError],
) -> object:
    """Returns the normalised value, or ``_REFUSED`` after recording why in ``errors``."""

    def refuse(message: str) -> object:
        errors.append(FieldError(path, message))
        return _REFUSED

    got = got_value(value)
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
) -> dict[str, list]:
    """Checks a serve grid and returns it normalised, or raises ``ServeGridError``.

    A grid maps a flag name from ``SERVE_FLAGS`` to a non-empty list of distinct values; the
    run tries every combination. ``{}`` is valid: one trial with vLLM's defaults.

    Every problem is reported, each on its own path: unknown flags (with close names),
    a scalar or empty list where a list is expected, values of the wrong JSON type (no
    coercion: ``true`` is not ``1`` and ``"8"`` is not ``8``; an integer is accepted for a
    number flag), values out of range or not among the choices, duplicates, flags (or a
    ``false``) that ``vllm_version`` does not accept, a tensor x pipeline parallel size above
    ``gpu_count`` (reported on the ``tensor_parallel_size`` value, or the
    ``pipeline_parallel_size`` value when tensor parallelism is not varied), ``max_model_len``
    above ``max_context``, and more than ``max_trials`` combinations (path ``""``).

    ``vllm_version=None`` means the version is unknown: no version checks, and flags render
    in their newest form. The result lists flags in ``SERVE_FLAGS`` order with number values
    as ``float``. Raises plain ``ValueError`` (not ``ServeGridError``) for a bad
    ``gpu_count``, ``max_trials`` or ``vllm_version``, which are the caller's to get right.
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

    if len(grid) > len(SERVE_FLAGS):
        # More keys than there are flags: some are unknown, and naming each would cost as
        # much as the grid is large.
        raise ServeGridError(
            [FieldError("", f"at most {len(SERVE_FLAGS)} flags; got {len(grid)} keys")]
        )
    errors: list[FieldError] = []
    normalised: dict[str, list] = {}
    # Values that passed their own checks, with their index, for the cross-flag rules.
    accepted: dict[str, list[tuple[int, object]]] = {}
    trials = 1
    sizes: list[str] = []
    for name, values in grid.items():
        spec = _lookup_flag(name, errors)
        if spec is None:
            continue
        unavailable = _flag_available(spec, version)
        if unavailable:
            errors.append(FieldError(name, unavailable))
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
        first_index: dict[object, int] = {}
        for index, raw in enumerate(values):
            path = f"{name}[{index}]"
            value = _check_value(spec, raw, path, version, errors)
            if value is _REFUSED:
                continue
            if value in first_index:
                errors.append(
                    FieldError(
                        path, f"duplicate of {name}[{first_index[value]}] ({json_literal(value)})"
                    )
                )
                continue
            first_index[value] = index
            good.append((index, value))
        accepted[name] = good
        normalised[name] = [value for _, value in good]

    _check_parallelism(accepted, gpu_count, errors)
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
    return {name: normalised[name] for name in SERVE_FLAGS if name in normalised}


def _check_parallelism(
    accepted: Mapping[str, list[tuple[int, object]]], gpu_count: int, errors: list[FieldError]
) -> None:
    # The grid is a full cartesian product, so a tensor parallel size is only usable if it fits
    # with the *largest* pipeline parallel size it will be combined with.
    tensor = accepted.get("tensor_parallel_size")
    pipeline = accepted.get("pipeline_parallel_size")
    if tensor:
        widest_pipeline = max((size for _, size in pipeline or []), default=1)
        for index, size in tensor:
            needed = size * widest_pipeline
            if needed > gpu_count:
                combined = (
                    f" x pipeline_parallel_size {widest_pipeline}" if widest_pipeline > 1 else ""
                )
                errors.append(
                    FieldError(
                        f"tensor_parallel_size[{index}]",
                        f"tensor_parallel_size {size}{combined} needs {needed} GPUs; "
                        f"the experiment has {gpu_count}",
                    )
                )
    elif pipeline:
        for index, size in pipeline:
            if size > gpu_count:
                errors.append(
                    FieldError(
                        f"pipeline_parallel_size[{index}]",
                        f"pipeline_parallel_size {size} needs {size} GPUs; "
                        f"the experiment has {gpu_count}",
                    )
                )


def expand_serve_grid(grid: Mapping[str, list]) -> list[dict[str, object]]:
    """Lists every serve configuration of a (validated) grid, in a stable order.

    Flags are taken in ``SERVE_FLAGS`` order whatever the mapping's key order (a grid read
    back from a JSON column may come back reordered), values in list order, and the first
    flag varies slowest, so trial ``i`` of a stored grid is always the same configuration.
    ``{}`` gives ``[{}]``: one trial with vLLM's defaults. Values are not re-checked; an
    unknown flag raises ``ServeGridError``.
    """
    errors: list[FieldError] = []
    for name in grid:
        _lookup_flag(name, errors)
    if errors:
        raise ServeGridError(errors)
    names = [name for name in SERVE_FLAGS if name in grid]
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
    a grid value and normalised; raises ``ServeGridError`` with paths equal to the flag
    names."""
    version = _version_key_or_none(vllm_version)
    errors: list[FieldError] = []
    values: dict[str, object] = {}
    for name, raw in config.items():
        spec = _lookup_flag(name, errors)
        if spec is None:
            continue
        unavailable = _flag_available(spec, version)
        if unavailable:
            errors.append(FieldError(name, unavailable))
        if isinstance(raw, list | tuple | Mapping):
            errors.append(FieldError(name, f"expected a single value, {got_value(raw)}"))
            continue
        value = _check_value(spec, raw, name, version, errors)
        if value is not _REFUSED:
            values[name] = value
    if errors:
        raise ServeGridError(errors)
    return values
