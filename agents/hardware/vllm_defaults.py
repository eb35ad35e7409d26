"""What a vLLM version sets when a serve flag is left out: one table, by version range, entry
point and GPU, with the source of every value.

Guarantees:

- ``batch_defaults(release, gpu, entry_point)`` is the only place Benchsite reads vLLM's
  default ``max_num_batched_tokens``, ``max_num_seqs``, chunked prefill and prefix caching;
  ``ServeSettings.from_flags`` (the start check) and the simulator fill every flag a
  configuration leaves out from it.
- ``release`` is the version's release numbers (``(0, 11, 0)``: what
  ``agents.protocol.parse_vllm_version`` gives first; a pre-release counts as its release).
  ``None`` (unknown) means the newest version the table knows. A version before the V1
  engine (0.8.0) gets the 0.8.0 row: the V0 engine and its defaults are not modelled
  (``BatchDefaults.modelled`` is then false, and says so).
- Entry points: ``"serve"`` is ``vllm serve`` (vLLM's ``UsageContext.OPENAI_API_SERVER``),
  ``"offline"`` the ``LLM`` class behind ``vllm bench latency``/``throughput``
  (``UsageContext.LLM_CLASS``).

How vLLM decides (``EngineArgs._set_default_args_v1``, from 0.11 ``get_batch_defaults``, in
``vllm/engine/arg_utils.py``), era by era:

- 0.8.0 (V1 by default): H100 and H200, told by the CUDA device name, get 16,384 (offline) /
  8,192 (serve) tokens, other GPUs 8,192 / 2,048 (PR #12369, "[V1] Increase default batch
  size for H100/H200", 2025-01-23); ``max_num_seqs`` 1,024 on every GPU (V1's default then,
  which PR #16158 calls "the default max_num_seqs from 1024").
- 0.8.4: ``max_num_seqs`` back to 256 except on H100/H200 (PR #16158, "[V1] Revert the
  default max_num_seqs to V0 values for most hardware", 2025-04-07: "many people have run
  into OOM when using V1"). The release is assumed from the PR's date (0.8.4: 2025-04-14).
- 0.8.5: the large defaults go to every GPU with at least 70 GiB (PR #17073, "Use larger
  batch sizes for A100/B100/B200/MI300x", opened 2025-04-23: "do this distinction based on
  GPU memory"), A100 80GB included. Assumed in 0.8.5 (2025-04-28) from the PR's date.
- 0.9.0: A100 excluded again (PR #17885, "[Perf] Use small max_num_batched_tokens for A100",
  2025-05-09: ``device_memory >= 70 * GiB_bytes and "a100" not in device_name``); vLLM's
  own test ``test_defaults_with_usage_context`` holds 16384/8192/1024 and 8192/2048/256.
  The same rule is ``get_batch_defaults`` in 0.11 and stays until 0.27.
- 0.28.0: a tier for at least 160 GiB ("for GPUs like B200/B300 with >= 160GB memory, use
  the largest defaults"): 16,384 tokens for ``vllm serve`` (read from v0.28.0's
  ``arg_utils.py`` as quoted in a third-party review of that release). Its offline token
  budget and its ``max_num_seqs`` were not in the sources read: assumed 16,384 and 1,024,
  those of the tier below.
- Chunked prefill and prefix caching are on by default in V1 (``_set_default_args_v1``:
  "V1 always uses chunked prefills", "V1 enables prefix caching by default").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agents.hardware.gpus import GpuProfile

EntryPoint = Literal["serve", "offline"]
ENTRY_POINTS: tuple[EntryPoint, ...] = ("serve", "offline")


@dataclass(frozen=True)
class BatchDefaults:
    """The defaults one vLLM version sets for one GPU and entry point."""

    max_num_batched_tokens: int
    max_num_seqs: int
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    modelled: bool = True  # false: an older version than the table holds; its first row

    def as_flags(self) -> dict[str, object]:
        """The defaults under their serve-flag names (``agents.protocol.SERVE_FLAGS``)."""
        return {
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "enable_chunked_prefill": self.enable_chunked_prefill,
            "enable_prefix_caching": self.enable_prefix_caching,
        }


def _cuda_name(gpu: GpuProfile) -> str:
    # vLLM matches the CUDA device name ("NVIDIA H100 80GB HBM3"), which is Runpod's GPU id.
    return f"{gpu.runpod_id} {gpu.name}".lower()


def _named_hopper(gpu: GpuProfile) -> bool:
    name = _cuda_name(gpu)
    return "h100" in name or "h200" in name


def _large_memory(gpu: GpuProfile) -> bool:
    return gpu.memory_gib >= 70


def _large_memory_not_a100(gpu: GpuProfile) -> bool:
    return gpu.memory_gib >= 70 and "a100" not in _cuda_name(gpu)


# (tokens offline, tokens serve, max_num_seqs offline, max_num_seqs serve)
_LARGE = (16384, 8192, 1024, 1024)
_SMALL_V1_0 = (8192, 2048, 1024, 1024)
_SMALL = (8192, 2048, 256, 256)
_LARGEST = (16384, 16384, 1024, 1024)


@dataclass(frozen=True)
class _Era:
    """The rule of the versions from ``since`` until the next era's ``since``."""

    since: tuple[int, int, int]
    tiers: tuple  # ((predicate on the GPU, values), ...), first match; the last is the rest
    source: str


ERAS = (
    _Era((0, 8, 0), ((_named_hopper, _LARGE), (None, _SMALL_V1_0)), "vLLM PR #12369"),
    _Era((0, 8, 4), ((_named_hopper, _LARGE), (None, _SMALL)), "vLLM PR #16158"),
    _Era((0, 8, 5), ((_large_memory, _LARGE), (None, _SMALL)), "vLLM PR #17073"),
    _Era((0, 9, 0), ((_large_memory_not_a100, _LARGE), (None, _SMALL)), "vLLM PR #17885"),
    _Era(
        (0, 28, 0),
        (
            (lambda gpu: gpu.memory_gib >= 160, _LARGEST),
            (_large_memory_not_a100, _LARGE),
            (None, _SMALL),
        ),
        "vLLM v0.28.0 arg_utils.py (>= 160 GiB tier)",
    ),
)


def batch_defaults(
    release: Sequence[int] | None, gpu: GpuProfile, entry_point: EntryPoint = "serve"
) -> BatchDefaults:
    """What vLLM ``release`` (None: the newest known) sets on ``gpu`` for the flags a
    configuration leaves out; raises ``ValueError`` for an unknown entry point."""
    if entry_point not in ENTRY_POINTS:
        raise ValueError(f"unknown entry point {entry_point!r} (expected one of {ENTRY_POINTS})")
    era, modelled = ERAS[-1], True
    if release is not None:
        key = (*release, 0, 0, 0)[:3]
        earlier = [e for e in ERAS if e.since <= key]
        era, modelled = (earlier[-1], True) if earlier else (ERAS[0], False)
    values = next(values for holds, values in era.tiers if holds is None or holds(gpu))
    offline = entry_point == "offline"
    return BatchDefaults(
        max_num_batched_tokens=values[0] if offline else values[1],
        max_num_seqs=values[2] if offline else values[3],
        modelled=modelled,
    )
