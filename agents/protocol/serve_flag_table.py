"""The serve flags whose values need meaning beyond syntax (ranges, parallelism, memory,
quantization), hand-kept as data; every other flag a vLLM version knows comes from its
generated flag table (``agents.protocol.flag_tables``).

Guarantees: ``SERVE_FLAGS`` lists each flag once, in the order configurations and command
lines are written, with the values it accepts and the vLLM versions that accept it; a
malformed entry fails at import. ``SERVE_FLAGS_SCHEMA_VERSION`` says which table a stored
grid was checked against. What reads the table: ``serve_flags`` (validation, expansion)
and ``serve_flag_rendering`` (``vllm serve`` arguments, the published JSON Schema).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from agents.protocol.versions import parse_vllm_version

# Bump when the meaning of a stored grid changes (a flag renamed or a range narrowed), so the
# site can tell which schema a stored experiment was checked against.
SERVE_FLAGS_SCHEMA_VERSION = 1

FlagKind = Literal["int", "float", "bool", "choice", "str", "json"]
_FLAG_KINDS = ("int", "float", "bool", "choice", "str", "json")
# How a flag that takes several values writes them: after one option (argparse ``nargs``) or
# each after its own (``action="append"``).
_MULTIPLE = ("nargs", "append")


@dataclass(frozen=True)
class FlagSpec:
    """One ``vllm serve`` flag that an experiment may vary, and the values it accepts.

    - ``kind`` is ``"int"``, ``"float"``, ``"bool"`` or ``"choice"`` (strings; ``None`` in
      ``choices`` means "leave the flag out"). An ``"int"`` flag with ``choices`` accepts only
      those integers. Flags read from a version's flag table (``flag_tables``) may also be
      ``"str"`` (any text) or ``"json"`` (an object, array or text vLLM parses itself), and
      take a list per value when ``multiple`` says how the list is written.
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
    multiple: str | None = None

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
        if self.multiple is not None and self.multiple not in _MULTIPLE:
            raise ValueError(f"{self.name}: unknown multiple {self.multiple!r}")
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
        name="data_parallel_size",
        kind="int",
        cli="--data-parallel-size",
        help="Engine replicas, each on its own tensor x pipeline parallel group of GPUs.",
        minimum=1,
        maximum=64,
    ),
    FlagSpec(
        name="enable_expert_parallel",
        kind="bool",
        cli="--enable-expert-parallel",
        help="Spread a mixture-of-experts model's experts across the GPUs instead of "
        "splitting each expert (tensor parallelism) for its MoE layers.",
        negative_cli="--no-enable-expert-parallel",
    ),
    FlagSpec(
        name="decode_context_parallel_size",
        kind="int",
        cli="--decode-context-parallel-size",
        help="GPUs of each tensor parallel group that split the KV cache along the context "
        "during decode; must divide tensor_parallel_size.",
        minimum=1,
        maximum=64,
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
            # Checked in vLLM 0.11's QuantizationMethods (quantization/__init__.py).
            "fbgemm_fp8",
            "ptpc_fp8",
            "modelopt",
            "modelopt_fp4",
            "mxfp4",
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
