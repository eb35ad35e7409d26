"""The one schema shared by the Benchsite site and its agent: serve flags, workloads, SLOs.

Guarantees:

- Pure Python: stdlib and pydantic only. The site imports this module; the agent runs it in
  a GPU pod where Django does not exist.
- The serve-flag schema is data (``SERVE_FLAGS``), versioned by
  ``SERVE_FLAGS_SCHEMA_VERSION``. Everything that accepts, expands or renders a serve
  configuration goes through it, so the site refuses exactly what the agent could not run.
- Validation is strict and complete: a boolean is not a number, ``"8"`` is not ``8``, and
  every problem is reported at once as a ``FieldError`` whose ``field`` is a path relative to
  the validated object (``max_num_seqs[1]``, ``dataset.input_len``, ``concurrency[2]``).
- ``serve_args`` returns an argv list for ``vllm serve``, never a shell string.
- Workload and SLO models are pydantic v2 models that forbid unknown fields, never coerce
  types and are immutable once built. They accept both ``model_validate`` on parsed JSON and
  ``model_validate_json``.
"""

from __future__ import annotations

import datetime
import difflib
import itertools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Annotated, Literal, Union, get_args, get_origin
from uuid import UUID

import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Tag,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldError:
    """One problem with one input field.

    ``field`` is a path relative to the validated object: dotted for object keys and indexed
    for list items (``max_num_seqs[1]``, ``dataset.input_len``). The empty string means the
    object as a whole (for a serve grid: its size).
    """

    field: str
    message: str


class ServeGridError(ValueError):
    """A serve grid or serve configuration was refused; ``errors`` lists every reason.

    Paths in ``errors`` are relative to the grid (``"max_num_seqs[1]"``, ``"bogus_flag"``, or
    ``""`` for the whole grid), so a caller can prefix them with where the grid sits.
    """

    def __init__(self, errors: Sequence[FieldError]):
        self.errors: list[FieldError] = list(errors)
        # One line per problem: messages contain ";" and "," themselves.
        super().__init__(
            "\n".join(f"{error.field or '(grid)'}: {error.message}" for error in self.errors)
        )

    def __reduce__(self):
        # Celery and multiprocessing pickle exceptions; rebuild from the errors, not the text.
        return (type(self), (self.errors,))


# ---------------------------------------------------------------------------------------------
# vLLM versions
# ---------------------------------------------------------------------------------------------

# A PEP 440-like subset: release numbers, then optional aN/bN/rcN, .postN, .devN and +local.
# Enough for vLLM's own versions ("0.6.4.post2.dev157+g2f0a0a17") without `packaging`.
_VERSION = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|rc)(?P<pre_n>\d*))?"
    r"(?:[-_.]?post(?P<post_n>\d*))?"
    r"(?:[-_.]?dev(?P<dev_n>\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "b": 1, "rc": 2}

VersionKey = tuple[tuple[int, ...], tuple[int, int], int, float]


def parse_vllm_version(version: str) -> VersionKey:
    """Turns a vLLM version string into a key that compares the way PEP 440 orders versions.

    ``"0.9"`` equals ``"0.9.0"``; ``"0.9.0rc1"`` and ``"0.9.0.dev3"`` sort before ``"0.9.0"``;
    ``"0.9.0.post1"`` and local tags such as ``"+cpu"`` do not change the release. Raises
    ``ValueError`` for anything else (``"latest"``, ``"nightly"``): map those to ``None``.
    """
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise ValueError(f"not a vLLM version: {version!r} (expected e.g. '0.11.0')")
    release = tuple(int(part) for part in match["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]  # "0.9.0" and "0.9" are the same release
    has_post = match["post_n"] is not None
    has_dev = match["dev_n"] is not None
    if match["pre"]:
        phase = (_PRE_RANK[match["pre"].lower()], int(match["pre_n"] or 0))
    elif has_dev and not has_post:
        phase = (-1, 0)  # X.Y.devN comes before every pre-release of X.Y
    else:
        phase = (3, 0)  # the final release
    post = int(match["post_n"] or 0) if has_post else -1
    dev = float(match["dev_n"] or 0) if has_dev else math.inf
    return (release, phase, post, dev)


def _version_key_or_none(vllm_version: str | None) -> VersionKey | None:
    return None if vllm_version is None else parse_vllm_version(vllm_version)


# ---------------------------------------------------------------------------------------------
# The serve-flag schema
# ---------------------------------------------------------------------------------------------

# Bump when the meaning of a stored grid changes (a flag renamed or a range narrowed), so the
# site can tell which schema a stored experiment was checked against.
SERVE_FLAGS_SCHEMA_VERSION = 1

FlagKind = Literal["int", "float", "bool", "choice"]
_FLAG_KINDS = ("int", "float", "bool", "choice")


@dataclass(frozen=True)
class FlagSpec:
    """One ``vllm serve`` flag that an experiment may vary, and the values it accepts.

    - ``kind`` is ``"int"``, ``"float"``, ``"bool"`` or ``"choice"`` (strings; ``None`` in
      ``choices`` means "leave the flag out"). An ``"int"`` flag with ``choices`` accepts only
      those integers.
    - ``minimum``/``maximum`` are inclusive, except that ``exclusive_minimum`` makes the
      minimum itself invalid.
    - For a ``"bool"`` flag, ``cli`` turns it on. ``negative_cli`` turns it off where vLLM has
      such a form (argparse ``BooleanOptionalAction``); without one, off is said by leaving
      the flag out (``store_true`` flags, off by default). ``negative_since`` is the first
      vLLM version known to accept ``negative_cli``.
    - ``since``/``removed_in`` bound the vLLM versions that accept the flag at all
      (``since <= version < removed_in``); ``renamed_to`` names its successor, if any.
    """

    name: str
    kind: FlagKind
    cli: str
    help: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    exclusive_minimum: bool = False
    choices: tuple[int | str | None, ...] | None = None
    negative_cli: str | None = None
    negative_since: str | None = None
    since: str | None = None
    removed_in: str | None = None
    renamed_to: str | None = None
    unit: str | None = None

    def __post_init__(self) -> None:
        # The table below is hand-written: catch a malformed entry at import, not in a pod.
        if self.kind not in _FLAG_KINDS:
            raise ValueError(f"{self.name}: unknown kind {self.kind!r}")
        if self.kind == "choice" and not self.choices:
            raise ValueError(f"{self.name}: a choice flag needs choices")
        if self.kind == "bool" and (self.minimum is not None or self.maximum is not None):
            raise ValueError(f"{self.name}: a bool flag has no range")
        if self.negative_cli is not None and self.kind != "bool":
            raise ValueError(f"{self.name}: only a bool flag has a negative form")
        if self.negative_since is not None and self.negative_cli is None:
            raise ValueError(f"{self.name}: negative_since without negative_cli")
        for version in (self.since, self.removed_in, self.negative_since):
            if version is not None:
                parse_vllm_version(version)


# The version data is deliberately conservative: a `since`, `removed_in` or `negative_since`
# is recorded only where it was checked against vLLM's source or release history, and a
# recorded `*_since` may be later than the true first version (refusing a working setting is
# cheaper than renting a GPU for a command line vLLM rejects). Unknown facts stay None, which
# means "accepted by every version".
_FLAG_LIST = (
    FlagSpec(
        name="max_num_batched_tokens",
        kind="int",
        cli="--max-num-batched-tokens",
        help="Most tokens the scheduler puts in one engine step (prefill chunk budget).",
        minimum=16,
        maximum=2_097_152,
    ),
    FlagSpec(
        name="max_num_seqs",
        kind="int",
        cli="--max-num-seqs",
        help="Most sequences (requests) running in one engine step.",
        minimum=1,
        maximum=16_384,
    ),
    FlagSpec(
        name="max_model_len",
        kind="int",
        cli="--max-model-len",
        help="Context length served: prompt plus output tokens per request.",
        minimum=16,
        maximum=10_485_760,
    ),
    FlagSpec(
        name="gpu_memory_utilization",
        kind="float",
        cli="--gpu-memory-utilization",
        help="Fraction of each GPU's memory vLLM may use for weights, activations and KV cache.",
        minimum=0.0,
        maximum=1.0,
        exclusive_minimum=True,
    ),
    FlagSpec(
        name="tensor_parallel_size",
        kind="int",
        cli="--tensor-parallel-size",
        help="GPUs each layer is split across (tensor parallelism).",
        choices=(1, 2, 4, 8, 16),
    ),
    FlagSpec(
        name="pipeline_parallel_size",
        kind="int",
        cli="--pipeline-parallel-size",
        help="Pipeline stages the layers are split into (pipeline parallelism).",
        minimum=1,
        maximum=16,
    ),
    FlagSpec(
        name="enable_prefix_caching",
        kind="bool",
        cli="--enable-prefix-caching",
        help="Reuse the KV cache of prompt prefixes shared between requests.",
        negative_cli="--no-enable-prefix-caching",
        # BooleanOptionalAction was checked in the 0.7 series' arg_utils.py.
        negative_since="0.7.0",
    ),
    FlagSpec(
        name="enable_chunked_prefill",
        kind="bool",
        cli="--enable-chunked-prefill",
        help="Split long prefills into chunks scheduled alongside decodes.",
        negative_cli="--no-enable-chunked-prefill",
        # Up to the 0.7 series the flag took an optional value instead (StoreBoolean), which
        # later versions reject; the negative form is documented in use from 0.9.
        negative_since="0.9.0",
    ),
    FlagSpec(
        name="kv_cache_dtype",
        kind="choice",
        cli="--kv-cache-dtype",
        help="Data type of the KV cache; 'auto' follows the model's dtype.",
        choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
    ),
    FlagSpec(
        name="dtype",
        kind="choice",
        cli="--dtype",
        help="Data type of weights and activations; 'auto' follows the model's config.",
        choices=("auto", "half", "float16", "bfloat16", "float", "float32"),
    ),
    FlagSpec(
        name="quantization",
        kind="choice",
        cli="--quantization",
        help="Weight quantization method; null lets vLLM read it from the model's config.",
        choices=(
            None,
            "awq",
            "gptq",
            "fp8",
            "bitsandbytes",
            "compressed-tensors",
            "gguf",
            "marlin",
            "awq_marlin",
            "gptq_marlin",
        ),
    ),
    FlagSpec(
        name="block_size",
        kind="int",
        cli="--block-size",
        help="Tokens per KV-cache block.",
        choices=(1, 8, 16, 32, 64, 128),
    ),
    FlagSpec(
        name="enforce_eager",
        kind="bool",
        cli="--enforce-eager",
        help="Run eagerly, without CUDA graphs: faster start-up, usually slower serving.",
    ),
    FlagSpec(
        name="swap_space",
        kind="float",
        cli="--swap-space",
        help="CPU swap space per GPU for preempted sequences.",
        minimum=0.0,
        maximum=1024.0,
        unit="GiB",
        # vLLM's engine arguments no longer have swap_space from 0.18.0 on.
        removed_in="0.18.0",
    ),
)

SERVE_FLAGS: dict[str, FlagSpec] = {spec.name: spec for spec in _FLAG_LIST}
# Room for a CLI spelling of the longest flag ("--max-num-batched-tokens") and a typo or two.
_FLAG_NAME_MAX_CHARS = 2 * max(len(name) for name in SERVE_FLAGS)

MAX_GRID_TRIALS = 64

# A sentinel for "this value was refused" (None is a legitimate choice value).
_REFUSED = object()


def _json_type_name(value: object) -> str:
    # Messages talk JSON, the language the user wrote the grid in.
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _json_literal(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        # Echo user text in quotes, and only so much of it.
        return json.dumps(value if len(value) <= 40 else value[:40] + "...")
    if isinstance(value, int | float):
        return str(value)
    return _json_type_name(value)


def _got(value: object) -> str:
    """``got boolean true``, ``got string "8"``, ``got null``, ``got array``."""
    kind = _json_type_name(value)
    literal = _json_literal(value)
    return f"got {kind}" if literal == kind else f"got {kind} {literal}"


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

    got = _got(value)
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
            options = ", ".join(_json_literal(choice) for choice in spec.choices)
            return refuse(f"must be one of {options}; got {_json_literal(value)}")
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
        options = ", ".join(_json_literal(choice) for choice in spec.choices)
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
                    f"expected a list of values, e.g. [{_json_literal(values)}]; {_got(values)}"
                    if isinstance(values, str | int | float)
                    else f"expected a list of values; {_got(values)}",
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
                        path, f"duplicate of {name}[{first_index[value]}] ({_json_literal(value)})"
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


def serve_args(config: Mapping[str, object], *, vllm_version: str | None = None) -> list[str]:
    """The ``vllm serve`` arguments for one serve configuration, as an argv list.

    ``config`` maps flag names to single values (one element of ``expand_serve_grid``). The
    values are checked with the same rules as a grid value (raising ``ServeGridError`` with
    paths equal to the flag names) before anything is rendered. Flags come out in
    ``SERVE_FLAGS`` order; numbers as decimal text; ``true`` as the flag, ``false`` as its
    negative form or, for a flag without one, nothing; a ``null`` choice as nothing.
    """
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
            errors.append(FieldError(name, f"expected a single value, {_got(raw)}"))
            continue
        value = _check_value(spec, raw, name, version, errors)
        if value is not _REFUSED:
            values[name] = value
    if errors:
        raise ServeGridError(errors)

    argv: list[str] = []
    for name, spec in SERVE_FLAGS.items():
        if name not in values:
            continue
        value = values[name]
        if spec.kind == "bool":
            if value:
                argv.append(spec.cli)
            elif spec.negative_cli:
                argv.append(spec.negative_cli)
        elif value is not None:
            # repr() of a float is the shortest text that parses back to the same float.
            argv.extend([spec.cli, repr(value) if isinstance(value, float) else str(value)])
    return argv


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

    ``properties`` validates the shape of a grid (value types, ranges, choices, unique
    non-empty lists); rules that involve the experiment (GPU count, context length, grid
    size, vLLM version) are only in ``validate_serve_grid``. ``x-flags`` lists every flag in
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
        "additionalProperties": False,
        "properties": properties,
        "x-schema-version": SERVE_FLAGS_SCHEMA_VERSION,
        "x-max-trials": max_trials,
        "x-flags": flags,
    }


# ---------------------------------------------------------------------------------------------
# Workload and SLOs
# ---------------------------------------------------------------------------------------------

MAX_INPUT_LEN = 1_048_576
MAX_OUTPUT_LEN = 262_144
MAX_CONCURRENCY = 16_384
MAX_LOAD_LEVELS = 32
# Open-loop rates from one request per 1000 s to 10,000 per second ("inf" sends all at once).
REQUEST_RATE_RANGE = (0.001, 10_000.0)
# Gamma shape of the gaps between requests: 0.01 is burstier than any real traffic, 100 as
# steady as a metronome.
BURSTINESS_RANGE = (0.01, 100.0)
# An objective above an hour says nothing a benchmark could measure.
MAX_SLO_MS = 3_600_000.0


class StrictModel(BaseModel):
    """Base of every protocol model: unknown fields are refused, types are never coerced
    (``"8"`` is not ``8``, ``true`` is not ``1``; an integer is accepted for a float), and an
    instance cannot be changed once validated. An object with more keys than the model has
    fields is refused as a whole, naming a few of the unknown keys, so that its cost and its
    error stay small whatever was sent."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @pydantic.model_validator(mode="before")
    @classmethod
    def _not_too_many_keys(cls, data: object) -> object:
        if isinstance(data, Mapping) and len(data) > len(cls.model_fields):
            unknown = [key for key in data if key not in cls.model_fields]
            named = ", ".join(_json_literal(key) for key in unknown[:3])
            more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise PydanticCustomError(
                "too_many_fields",
                "unknown fields {named}{more}",
                {"named": named, "more": more},
            )
        return data


InputLen = Annotated[int, Field(ge=1, le=MAX_INPUT_LEN)]
OutputLen = Annotated[int, Field(ge=1, le=MAX_OUTPUT_LEN)]
# JSON has no infinity; "inf" is spelled as a string where it is meaningful (request rates).
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
RequestRateNumber = Annotated[
    float, Field(ge=REQUEST_RATE_RANGE[0], le=REQUEST_RATE_RANGE[1], allow_inf_nan=False)
]
SloMs = Annotated[float, Field(gt=0, le=MAX_SLO_MS, allow_inf_nan=False)]


class RandomDataset(StrictModel):
    """Synthetic prompts of random tokens, as ``vllm bench serve --dataset-name random``.

    Lengths are drawn from ``[len x (1 - range_ratio), len x (1 + range_ratio)]``; a ratio
    below 1 keeps every length at least one token.
    """

    kind: Literal["random"] = "random"
    input_len: InputLen
    output_len: OutputLen
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0, allow_inf_nan=False)


class ShareGptDataset(StrictModel):
    """Conversations from a ShareGPT-format file uploaded to the site, referenced by id.

    ``output_len``, when given, replaces each conversation's own reply length.
    """

    kind: Literal["sharegpt"] = "sharegpt"
    # Lax on purpose: parsed JSON carries a UUID as a string, which strict mode would refuse.
    dataset_id: UUID = Field(strict=False)
    output_len: OutputLen | None = None


class PrefixDataset(StrictModel):
    """Prompts sharing one of ``num_prefixes`` common prefixes, then a unique suffix: the
    workload that shows what prefix caching is worth."""

    kind: Literal["prefix"] = "prefix"
    shared_len: InputLen
    suffix_len: InputLen
    output_len: OutputLen
    num_prefixes: int = Field(default=1, ge=1, le=1024)


Dataset = Annotated[RandomDataset | ShareGptDataset | PrefixDataset, Field(discriminator="kind")]


def _request_rate(value: object, handler: ValidatorFunctionWrapHandler) -> float | str:
    try:
        return handler(value)
    except pydantic.ValidationError:
        # One message for the whole union instead of one per member ("should be 'inf'"...).
        raise PydanticCustomError(
            "request_rate",
            'expected a number from {low} to {high} or "inf"; got {value}',
            {
                "value": _json_literal(value),
                "low": f"{REQUEST_RATE_RANGE[0]:g}",
                "high": f"{REQUEST_RATE_RANGE[1]:g}",
            },
        ) from None


RequestRate = Annotated[RequestRateNumber | Literal["inf"], WrapValidator(_request_rate)]


def _duplicates_error(
    title: str, field: str, values: Sequence[object]
) -> pydantic.ValidationError | None:
    first: dict[object, int] = {}
    details: list[InitErrorDetails] = []
    for index, value in enumerate(values):
        if value in first:
            details.append(
                InitErrorDetails(
                    type=PydanticCustomError(
                        "duplicate_level",
                        "duplicate of {field}[{first}] ({value})",
                        {"field": field, "first": first[value], "value": _json_literal(value)},
                    ),
                    loc=(index,),
                    input=value,
                )
            )
        else:
            first[value] = index
    if not details:
        return None
    # A ValidationError raised in a field validator keeps its locations, relative to the
    # field: the duplicate is reported on its own index.
    return pydantic.ValidationError.from_exception_data(title, details)


class Workload(StrictModel):
    """The load applied to every trial: a dataset, an endpoint and the load levels.

    Levels are the ``concurrency`` values (requests in flight, capped) followed by the
    ``request_rates`` (requests per second with gamma-distributed gaps of shape
    ``burstiness``; ``"inf"`` sends all at once); at least one level, at most
    ``MAX_LOAD_LEVELS`` in all, no value twice in a list. Each level sends
    ``requests_per_level`` requests after ``warmup_requests`` unmeasured ones.
    """

    dataset: Dataset
    endpoint: Literal["completions", "chat"] = "completions"
    # Declared before `concurrency` because the concurrency validator reads it.
    request_rates: list[RequestRate] = Field(default_factory=list, max_length=MAX_LOAD_LEVELS)
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(
        default_factory=list, max_length=MAX_LOAD_LEVELS, validate_default=True
    )
    burstiness: float = Field(
        default=1.0, ge=BURSTINESS_RANGE[0], le=BURSTINESS_RANGE[1], allow_inf_nan=False
    )
    requests_per_level: int = Field(default=200, ge=1, le=1_000_000)
    warmup_requests: int = Field(default=0, ge=0, le=100_000)

    @field_validator("request_rates")
    @classmethod
    def _rates_distinct(cls, rates: list[float | str]) -> list[float | str]:
        error = _duplicates_error(cls.__name__, "request_rates", rates)
        if error is not None:
            raise error
        return rates

    @field_validator("concurrency")
    @classmethod
    def _concurrency_levels(cls, concurrency: list[int], info: ValidationInfo) -> list[int]:
        error = _duplicates_error(cls.__name__, "concurrency", concurrency)
        if error is not None:
            raise error
        # Absent when request_rates itself was refused: its own error says enough.
        if "request_rates" in info.data:
            rates = info.data["request_rates"]
            if not concurrency and not rates:
                raise PydanticCustomError(
                    "no_load_levels",
                    "give at least one load level: a concurrency or a request rate",
                )
            if len(concurrency) + len(rates) > MAX_LOAD_LEVELS:
                raise PydanticCustomError(
                    "too_many_load_levels",
                    "concurrency and request_rates list {count} levels together; "
                    "at most {limit} are allowed",
                    {"count": len(concurrency) + len(rates), "limit": MAX_LOAD_LEVELS},
                )
        return concurrency


class Slos(StrictModel):
    """Service-level objectives in milliseconds, each optional, applied to p99 and to goodput
    (a request counts when it meets every objective given). Names follow ``vllm bench
    serve``: TTFT, TPOT, ITL and E2EL."""

    ttft_ms: SloMs | None = None
    tpot_ms: SloMs | None = None
    itl_ms: SloMs | None = None
    e2el_ms: SloMs | None = None


def workload_levels(workload: Workload) -> list[dict[str, int | float | str]]:
    """The load levels of a workload in the order they run: ``{"concurrency": n}`` for each
    concurrency as given, then ``{"request_rate": r}`` for each rate (``"inf"`` stays the
    string ``"inf"``, so a level is always plain JSON)."""
    levels: list[dict[str, int | float | str]] = [
        {"concurrency": concurrency} for concurrency in workload.concurrency
    ]
    levels.extend({"request_rate": rate} for rate in workload.request_rates)
    return levels


# ---------------------------------------------------------------------------------------------
# pydantic errors as FieldErrors
# ---------------------------------------------------------------------------------------------


def _strip_annotated(annotation: object) -> object:
    """Drops ``Annotated[...]`` wrappers and the ``None`` of ``X | None``; pydantic puts no
    location segment for either."""
    while True:
        if get_origin(annotation) is Annotated:
            annotation = get_args(annotation)[0]
            continue
        members = _union_members(annotation)
        if members is not None and len(members) == 1:
            annotation = members[0]
            continue
        return annotation


def _union_members(annotation: object) -> list[object] | None:
    if get_origin(annotation) not in (Union, UnionType):
        return None
    return [member for member in get_args(annotation) if member is not NoneType]


def _is_tag_of(member: object, segment: object) -> bool:
    if get_origin(member) is Annotated and any(
        isinstance(meta, Tag) and meta.tag == segment for meta in get_args(member)[1:]
    ):
        return True
    model = _strip_annotated(member)
    if isinstance(model, type) and issubclass(model, BaseModel):
        if segment == model.__name__:
            return True
        # A discriminated union is tagged by the value of the model's Literal field.
        return any(
            get_origin(field.annotation) is Literal and segment in get_args(field.annotation)
            for field in model.model_fields.values()
        )
    return False


def _descend(annotation: object, segment: object) -> tuple[object, bool]:
    """The type found at ``segment`` below ``annotation``, and whether the segment is a union
    tag that pydantic inserted (and that a user never wrote)."""
    annotation = _strip_annotated(annotation)
    members = _union_members(annotation)
    if members is not None:
        # Below a union, pydantic always names the member it tried: that segment is a tag.
        for member in members:
            if _is_tag_of(member, segment):
                return member, True
        return None, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        field = annotation.model_fields.get(segment) if isinstance(segment, str) else None
        return (field.annotation if field is not None else None), False
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (list, set, frozenset, Sequence) and args:
        return args[0], False
    if origin is tuple and args:
        return (args[0] if len(args) == 2 and args[1] is Ellipsis else None), False
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1], False
    return None, False  # unknown below here: keep segments as they are


def _protocol_models() -> dict[str, type[BaseModel]]:
    found: dict[str, type[BaseModel]] = {}
    pending: list[type[BaseModel]] = [StrictModel]
    while pending:
        model = pending.pop()
        found.setdefault(model.__name__, model)
        pending.extend(model.__subclasses__())
    return found


def _join_path(prefix: str, parts: Sequence[object]) -> str:
    path = prefix
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path = f"{path}.{part}" if path else str(part)
    return path


def _readable_message(error: Mapping[str, object]) -> str:
    kind = error["type"]
    message = str(error["msg"])
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "union_tag_invalid":
        return f"unknown value {ctx.get('tag')!r}; expected one of {ctx.get('expected_tags')}"
    if kind in ("missing", "union_tag_not_found"):
        return "this field is required"
    if kind in ("value_error", "assertion_error"):
        # pydantic prefixes "Value error, "; the field path already says where.
        return message.split(", ", 1)[1] if ", " in message else message
    return message


def pydantic_field_errors(
    exc: pydantic.ValidationError,
    prefix: str = "",
    *,
    model: type[BaseModel] | None = None,
) -> list[FieldError]:
    """Converts a pydantic ``ValidationError`` into ``FieldError``s with the same path style
    as ``ServeGridError``: ``dataset.input_len``, ``concurrency[2]``, prefixed by ``prefix``
    (``prefix="workload"`` gives ``workload.dataset.input_len``).

    The segments pydantic inserts for union members (``('dataset', 'random', 'input_len')``)
    are dropped, so paths only name fields the user wrote; an unknown or missing dataset
    ``kind`` is reported on ``dataset.kind``. The model is found by the error's title among
    this module's models; pass ``model`` for any other model. One ``FieldError`` per pydantic
    error, in pydantic's order.
    """
    root: object = model if model is not None else _protocol_models().get(exc.title)
    result: list[FieldError] = []
    for error in exc.errors(include_url=False):
        parts: list[object] = []
        current = root
        for segment in error["loc"]:
            current, is_tag = _descend(current, segment) if current is not None else (None, False)
            if not is_tag:
                parts.append(segment)
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            # Point at the discriminator field itself; ctx quotes it: "'kind'".
            discriminator = str((error.get("ctx") or {}).get("discriminator", "")).strip("'")
            if discriminator.isidentifier():
                parts.append(discriminator)
        result.append(FieldError(_join_path(prefix, parts), _readable_message(error)))
    return result


# ---------------------------------------------------------------------------------------------
# JSON documents: nesting depth
# ---------------------------------------------------------------------------------------------

# The deepest nesting any Benchsite JSON document may have. Legitimate ones stay far below it:
# an experiment is about 4 deep (body → workload → dataset → list), an agent batch about 6
# (body → messages → message → result/server → metric → series). Python's JSON decoder and
# every recursive walk of a decoded value fail with RecursionError a few hundred levels down,
# so documents deeper than this are refused before they are decoded.
MAX_JSON_DEPTH = 64

# What a depth scan skips: whole strings (brackets inside them are text) and every run of
# characters that is neither a bracket nor a quote. What is left is the document's brackets.
# A string left open runs to the end of the text (the decoder stops there too): every quote
# then matches at once, which keeps the scan linear (no retrying from each later quote).
_JSON_NOT_A_BRACKET = r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)|[^\[\]{}"]+'
_JSON_NOT_A_BRACKET_TEXT = re.compile(_JSON_NOT_A_BRACKET, re.DOTALL)
_JSON_NOT_A_BRACKET_BYTES = re.compile(_JSON_NOT_A_BRACKET.encode(), re.DOTALL)
# How each bracket moves the depth, as str characters and as bytes (which iterate as ints).
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}
_BRACKET_STEP |= {ord(char): step for char, step in _BRACKET_STEP.items()}


def json_depth_exceeds(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON text ``text`` nests arrays and objects deeper than ``limit``.

    Reads the raw text without decoding it and without recursion, so no depth, however
    large, can exhaust the stack here: call it before ``json.loads``. On text that is not
    JSON the decoder fails before it nests deeper than this scan counts."""
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text)
        if text.count(b"[") + text.count(b"{") <= limit:
            return False  # too few brackets to nest that deep, whatever their order
        brackets = _JSON_NOT_A_BRACKET_BYTES.sub(b"", text)
    else:
        if text.count("[") + text.count("{") <= limit:
            return False
        brackets = _JSON_NOT_A_BRACKET_TEXT.sub("", text)
    depth = 0
    for char in brackets:
        depth += _BRACKET_STEP[char]
        if depth > limit:
            return True
    return False


class JsonTooDeep(ValueError):
    """A JSON document nests deeper than ``MAX_JSON_DEPTH``; it was not decoded."""


def json_loads_bounded(text: str | bytes, **kwargs) -> object:
    """``json.loads`` that raises ``JsonTooDeep`` (a ``ValueError``) for a document deeper
    than ``MAX_JSON_DEPTH`` instead of decoding it (and failing with ``RecursionError``)."""
    if isinstance(text, bytes | bytearray):
        # As json.loads would read them (UTF-8, -16 or -32): a UTF-16 character may hold a
        # bracket's or a quote's byte, so the bytes are scanned as the text they decode to.
        text = bytes(text).decode(json.detect_encoding(text), "surrogatepass")
    if json_depth_exceeds(text):
        raise JsonTooDeep(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(text, **kwargs)


# ---------------------------------------------------------------------------------------------
# Agent ↔ site messages
# ---------------------------------------------------------------------------------------------

# Bump when an agent message gains a field, or a field changes meaning, so that each side
# can tell what the other speaks. The site accepts every version ``AgentMessageBase.protocol``
# lists. 2: ``epoch`` (the agent's site-issued sequence space; protocol 1 is epoch 0).
PROTOCOL_VERSION = 2
MAX_LOG_TAIL_CHARS = 64 * 1024
# The largest values of the site's integer columns (PostgreSQL ``integer`` and ``bigint``).
# Every number an agent sends is bounded so that it fits where the site stores it: a value
# out of range is refused as one message naming its field, rather than failing the whole
# batch's write. Counts kept only inside JSON are bounded by the integer width too (a count
# beyond 2**31 is no real measurement, and JavaScript reads integers exactly only below 2**53).
INTEGER_COLUMN_MAX = 2**31 - 1
BIGINT_COLUMN_MAX = 2**63 - 1
# The REST batch (``{"messages": [...]}``): an agent never puts more messages, or more bytes
# of JSON, into one request, and a site accepts every batch within both (its request body
# limit is at least ``MAX_BATCH_BYTES``). One message larger than that travels alone.
MAX_BATCH_MESSAGES = 1000
MAX_BATCH_BYTES = 4 * 1024 * 1024

SeqNumber = Annotated[int, Field(ge=0, le=BIGINT_COLUMN_MAX)]  # AgentMessageRecord.seq: bigint
TrialIndex = Annotated[int, Field(ge=0, le=10_000)]  # Trial.index: integer
Count = Annotated[int, Field(ge=0, le=INTEGER_COLUMN_MAX)]
MAX_EPOCH = INTEGER_COLUMN_MAX  # AgentMessageRecord.epoch and Run.agent_epoch: integer
EpochNumber = Annotated[int, Field(ge=0, le=MAX_EPOCH)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
# UUIDs arrive as JSON strings; this one field is lax so parsed JSON validates as is.
RunId = Annotated[UUID, Field(strict=False)]


def _finite_json(value: object) -> object:
    """Refuses NaN and infinities anywhere in free-form JSON: PostgreSQL's jsonb cannot hold
    them, and a figure that is not a number must never reach a report. Integers are bounded
    by ``BIGINT_COLUMN_MAX`` either way: reports turn figures into floats and columns, where
    a 400-digit token count would fail a page instead of one message. Walks without
    recursion, so no nesting depth can exhaust the stack."""
    pending: list[tuple[object, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{path or 'value'} is not a finite number")
        if isinstance(item, int) and abs(item) > BIGINT_COLUMN_MAX:
            raise ValueError(f"{path or 'value'} is out of range (at most {BIGINT_COLUMN_MAX})")
        if isinstance(item, dict):
            pending.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, list):
            pending.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return value


FiniteJson = Annotated[dict[str, object], pydantic.AfterValidator(_finite_json)]


class Level(StrictModel):
    """One load level: a closed-loop concurrency or an open-loop request rate ("inf": all
    requests at once)."""

    concurrency: Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)] | None = None
    request_rate: PositiveFloat | Literal["inf"] | None = None

    @pydantic.model_validator(mode="after")
    def _exactly_one(self) -> Level:
        if (self.concurrency is None) == (self.request_rate is None):
            raise ValueError("give exactly one of concurrency and request_rate")
        return self


class AgentMessageBase(StrictModel):
    """Agent → site. Every message names its run, the sequence space of the agent that sent
    it (``epoch``: issued by the site to each agent start without its spool, see
    ``EpochGrant``) and a sequence number unique within that space. The site stores each
    ``(run_id, epoch, seq)`` once: a resend with the same content is acknowledged again, one
    with other content is refused as a conflict. Epoch 0 is the space of protocol 1 agents
    and of agents without a site."""

    protocol: Literal[1, 2] = PROTOCOL_VERSION
    run_id: RunId
    epoch: EpochNumber = 0
    seq: SeqNumber
    sent_at: FiniteFloat | None = None  # agent's wall clock (Unix seconds), for delay figures

    @field_validator("epoch")
    @classmethod
    def _epochs_need_protocol_2(cls, epoch: int, info: ValidationInfo) -> int:
        if epoch and info.data.get("protocol") == 1:
            raise ValueError("protocol 1 has no epochs; send protocol 2")
        return epoch


class GpuInfo(StrictModel):
    name: str = Field(max_length=200)
    memory_mib: Count


class HostFacts(StrictModel):
    """What the agent found about the machine it runs on."""

    hostname: str = Field(default="", max_length=255)
    gpus: list[GpuInfo] = Field(default_factory=list, max_length=64)
    driver_version: str | None = Field(default=None, max_length=100)
    cuda_version: str | None = Field(default=None, max_length=100)
    vllm_version: str | None = Field(default=None, max_length=100)
    cpu_count: Count | None = None
    pod_id: str | None = Field(default=None, max_length=100)


class Hello(AgentMessageBase):
    """The agent is up: who it is and what it runs on. Sent first, once per agent start."""

    type: Literal["hello"]
    agent_version: str = Field(max_length=100)
    host: HostFacts


class Heartbeat(AgentMessageBase):
    """The agent is alive (about every 10 s); a silent agent is reaped by the site."""

    type: Literal["heartbeat"]
    trial: TrialIndex | None = None


class TrialStarted(AgentMessageBase):
    """A trial's engine is being started with exactly this configuration and argv."""

    type: Literal["trial_started"]
    trial: TrialIndex
    serve_config: FiniteJson
    command: list[Annotated[str, Field(max_length=4096)]] = Field(max_length=512)


class ColdStartPhase(AgentMessageBase):
    """A cold-start phase was observed: seconds from the engine's process start."""

    type: Literal["cold_start_phase"]
    trial: TrialIndex
    phase: str = Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    detail: FiniteJson = Field(default_factory=dict)


class LevelProgress(AgentMessageBase):
    """Live figures of the running level (throttled to about 2 per second)."""

    type: Literal["level_progress"]
    trial: TrialIndex
    level: Level
    requests_done: Count
    requests_total: Count | None = None
    ttft_ms_p50: FiniteFloat | None = None
    ttft_ms_p99: FiniteFloat | None = None
    itl_ms_p50: FiniteFloat | None = None
    itl_ms_p99: FiniteFloat | None = None
    output_tokens_per_s: FiniteFloat | None = None
    kv_cache_usage: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    num_requests_waiting: Count | None = None


class MeasurementReport(AgentMessageBase):
    """One finished load level of one trial: the load generator's result (the
    ``vllm bench serve`` keys) and the server's metrics."""

    type: Literal["measurement"]
    trial: TrialIndex
    level: Level
    result: FiniteJson
    server: FiniteJson = Field(default_factory=dict)

    @field_validator("result")
    @classmethod
    def _has_core_keys(cls, result: dict) -> dict:
        missing = [key for key in ("completed", "failed", "duration") if key not in result]
        if missing:
            raise ValueError(f"result lacks {', '.join(missing)}")
        return result


TRIAL_FAILURE_CLASSES = (
    "oom_at_startup",
    "kv_cache_too_small",
    "unsupported_flag",
    "model_not_found",
    "startup_timeout",
    "crash",
    "deadline",
    "other",
)


class TrialFinished(AgentMessageBase):
    """A trial ended; a failed one says why, with the log lines that show it."""

    type: Literal["trial_finished"]
    trial: TrialIndex
    outcome: Literal["succeeded", "failed", "skipped"]
    failure_class: Literal[TRIAL_FAILURE_CLASSES] | None = None  # type: ignore[valid-type]
    log_tail: str = Field(default="", max_length=MAX_LOG_TAIL_CHARS)


class RunFinished(AgentMessageBase):
    """The agent is done with the run (all trials, a cancel, or its deadline)."""

    type: Literal["run_finished"]
    outcome: Literal["succeeded", "failed", "cancelled", "deadline"]
    reason: str = Field(default="", max_length=2000)


AgentMessage = Annotated[
    Hello
    | Heartbeat
    | TrialStarted
    | ColdStartPhase
    | LevelProgress
    | MeasurementReport
    | TrialFinished
    | RunFinished,
    Field(discriminator="type"),
]
_AGENT_MESSAGE = pydantic.TypeAdapter(AgentMessage)


_AGENT_MESSAGE_TYPES = frozenset(
    get_args(cls.model_fields["type"].annotation)[0] for cls in get_args(get_args(AgentMessage)[0])
)


def parse_agent_message(data: object) -> AgentMessage:
    """Validates one agent message (parsed JSON); raises ``pydantic.ValidationError``."""
    return _AGENT_MESSAGE.validate_python(data)


def message_seq(data: object) -> int | None:
    """The ``seq`` of a message that may be malformed, when it is a valid sequence number;
    else None. What a refusal may echo back: never a value the site could not store."""
    seq = data.get("seq") if isinstance(data, Mapping) else None
    valid = isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq <= BIGINT_COLUMN_MAX
    return seq if valid else None


def agent_message_errors(exc: pydantic.ValidationError) -> list[FieldError]:
    """Why ``parse_agent_message`` refused a message, by field path within the message
    (``seq``, ``level``, ``result``), without pydantic's union tag in front."""
    errors = []
    for error in exc.errors():
        loc = list(error["loc"])
        if loc and loc[0] in _AGENT_MESSAGE_TYPES:
            loc = loc[1:]
        elif not loc and error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            loc = ["type"]  # the discriminator itself is what is wrong
        errors.append(FieldError(_join_path("", loc), _readable_message(error)))
    return errors


class Ack(StrictModel):
    """Site → agent: the message ``seq`` is stored (or was already); drop it from the spool."""

    type: Literal["ack"] = "ack"
    seq: SeqNumber


class Rejected(StrictModel):
    """Site → agent: a message was refused and will never be stored; ``seq`` when known."""

    type: Literal["rejected"] = "rejected"
    seq: SeqNumber | None = None
    reason: str


class EpochGrant(StrictModel):
    """Site → agent (``POST /api/v1/agent/runs/<id>/epoch/``): a sequence space of its own
    for an agent that starts without a spool. Each request gets a new, larger one; the agent
    keeps it with its spool and numbers from 0 within it."""

    epoch: Annotated[int, Field(ge=1, le=MAX_EPOCH)]


class Cancel(StrictModel):
    """Site → agent: stop the run now (finish nothing, report, stop the engine, exit)."""

    type: Literal["cancel"] = "cancel"
    reason: str = ""


# ---------------------------------------------------------------------------------------------
# The job: everything an agent needs to run one run, unattended
# ---------------------------------------------------------------------------------------------

MAX_JOB_TRIALS = 1024


class ModelSource(StrictModel):
    """Which weights to serve and the architecture facts the simulator and memory checks use."""

    hf_repo: str = Field(max_length=200)
    revision: str = Field(default="main", max_length=100)
    served_model_name: str = Field(max_length=200)
    local_path: str | None = Field(default=None, max_length=1000)  # weights already on disk
    parameter_count: Annotated[int, Field(ge=1)]
    num_layers: Annotated[int, Field(ge=1)]
    hidden_size: Annotated[int, Field(ge=1)]
    num_attention_heads: Annotated[int, Field(ge=1)]
    num_kv_heads: Annotated[int, Field(ge=1)]
    head_dim: Annotated[int, Field(ge=1)]
    dtype: str = Field(max_length=16)
    max_context: Annotated[int, Field(ge=16)]


class EngineSpec(StrictModel):
    """What serves each trial: real vLLM (of this version) or the simulator (of these GPUs)."""

    kind: Literal["vllm", "sim"]
    image_tag: str | None = Field(default=None, max_length=128)
    vllm_version: str | None = Field(default=None, max_length=64)
    gpu_type: str = Field(max_length=100)
    gpu_count: Annotated[int, Field(ge=1, le=64)]
    sim_speed: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] = 1.0


class TrialSpec(StrictModel):
    index: TrialIndex
    serve_config: FiniteJson


class ReportTo(StrictModel):
    """Where results go: the site's WebSocket and REST base, or (both None) a results folder."""

    ws_url: str | None = Field(default=None, max_length=1000)
    rest_url: str | None = Field(default=None, max_length=1000)


class JobSpec(StrictModel):
    """Site → agent, once per run: trials in order, the workload every trial runs, the SLOs,
    the engine, the model, a hard deadline (the agent stops itself there, whatever the site
    does) and where to report. The run token travels apart from it (``BENCHSITE_TOKEN``)."""

    protocol: Literal[1] = 1  # the job is as in protocol 1: agents of either version read it
    run_id: RunId
    trials: list[TrialSpec] = Field(min_length=1, max_length=MAX_JOB_TRIALS)
    workload: Workload
    slos: Slos = Field(default_factory=Slos)
    engine: EngineSpec
    model: ModelSource
    deadline: Annotated[datetime.datetime, Field(strict=False)]
    report: ReportTo = Field(default_factory=ReportTo)

    @field_validator("deadline")
    @classmethod
    def _aware(cls, deadline: datetime.datetime) -> datetime.datetime:
        if deadline.tzinfo is None:
            raise ValueError("the deadline needs a time zone (e.g. 2026-11-29T23:00:00Z)")
        return deadline


def protocol_json_schema() -> dict:
    """JSON Schema of everything on the wire between agent and site (checked in CI against
    the committed copy in docs/protocol.schema.json)."""
    messages = pydantic.TypeAdapter(AgentMessage).json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Benchsite agent protocol",
        "x-protocol-version": PROTOCOL_VERSION,
        "x-serve-flags-schema-version": SERVE_FLAGS_SCHEMA_VERSION,
        "agent_to_site": messages,
        "site_to_agent": {
            model.__name__: model.model_json_schema()
            for model in (Ack, Rejected, Cancel, EpochGrant)
        },
        "job": JobSpec.model_json_schema(),
    }


if __name__ == "__main__":  # python -m agents.protocol > docs/protocol.schema.json
    print(json.dumps(protocol_json_schema(), indent=2, sort_keys=True))
