"""What precision vLLM stores a model's weights in and multiplies them at, on a given GPU.

Guarantees:

- ``served_precision`` answers for a model, the ``--quantization`` and ``--dtype`` flags and
  a GPU the way vLLM 0.11 chooses its kernels: the weights' stored width (a ``WEIGHT_BYTES``
  key) and the tensor-core precision of the linear layers' products (``"bf16"``, ``"fp8"``,
  ``"fp4"``). Attention, the LM head and the KV cache are not its business: they stay at
  16 bit (the KV cache follows ``--kv-cache-dtype``).
- A flag vLLM would refuse with this checkpoint raises ``ValueError`` with the reason.
- Pure: the same inputs always give the same answer.

How vLLM 0.11 runs each format (``vllm/model_executor/layers/quantization/``):

- FP8 (``fp8.py``): W8A8 with CUTLASS FP8 GEMMs on compute capability 8.9 and up (Ada,
  Hopper, Blackwell): activations are quantized per token, the product runs at the FP8
  tensor peak. Below 8.9 (Ampere: A100) ``use_marlin`` runs the FP8 weights through Marlin
  weight-only kernels: half the weight bytes, 16-bit products. ``--quantization fp8`` on a
  16-bit checkpoint quantizes the linear layers' weights at load (the embeddings and LM head
  stay 16 bit).
- AWQ / GPTQ / bitsandbytes / compressed-tensors INT4 or INT8 weights: weight-only
  (Marlin/Machete dequantize to 16 bit), so the product is a 16-bit one. A compressed-tensors
  W8A8 INT8 checkpoint would multiply in INT8; ModelFacts does not tell it from W8A16, so it
  is counted as weight-only (slower compute than vLLM's, same bytes).
- NVFP4 (``modelopt.py``): W4A4 FP4 GEMMs on Blackwell (CUTLASS / FlashInfer); elsewhere
  Marlin FP4 weight-only kernels.
- MXFP4 (``mxfp4.py``, gpt-oss): the default backends on Blackwell (FlashInfer
  ``SM100_FI_MXFP4_BF16``) and Hopper (Marlin, Triton) keep 16-bit activations: weight-only.
"""

from __future__ import annotations

from dataclasses import dataclass

from agents.hardware.gpus import GpuProfile
from agents.hardware.models import QUANTIZED_DTYPES

_SIXTEEN_BIT = frozenset({"bfloat16", "float16", "half", "auto"})

# Which checkpoint weight formats each --quantization method loads (vLLM reads the method
# from the checkpoint's quantization_config; a flag that names another is an error there).
_METHOD_LOADS = {
    "fp8": {"fp8"},
    "fbgemm_fp8": {"fp8"},
    "ptpc_fp8": {"fp8"},
    "modelopt": {"fp8"},
    "modelopt_fp4": {"nvfp4"},
    "mxfp4": {"mxfp4"},
    "awq": {"awq", "int4"},
    "awq_marlin": {"awq", "int4"},
    "gptq": {"gptq", "int4", "int8"},
    "gptq_marlin": {"gptq", "int4", "int8"},
    "marlin": {"gptq", "int4", "int8"},
    "compressed-tensors": {"fp8", "int8", "int4", "nvfp4"},
    "bitsandbytes": {"int4", "int8"},
}
# Methods that quantize a 16-bit checkpoint while loading it, and to what.
_ONLINE = {"fp8": "fp8", "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8", "bitsandbytes": "int4"}


@dataclass(frozen=True)
class Precision:
    """``weights``: their stored width (a ``WEIGHT_BYTES`` key); ``compute``: the tensor-core
    precision of the linear layers' products (``GpuProfile.tensor_tflops``)."""

    weights: str
    compute: str


def served_precision(
    checkpoint_dtype: str, gpu: GpuProfile, quantization: str | None = None, dtype: str = "auto"
) -> Precision:
    """The precision vLLM serves a checkpoint stored as ``checkpoint_dtype`` at on ``gpu``
    with ``--quantization`` and ``--dtype``; raises ``ValueError`` where vLLM would not load
    it."""
    weights = served_weight_dtype(checkpoint_dtype, quantization, dtype)
    compute = "bf16"
    if weights == "fp8" and gpu.fp8_tflops:
        compute = "fp8"
    elif weights == "nvfp4" and gpu.fp4_tflops:
        compute = "fp4"
    return Precision(weights=weights, compute=compute)


def served_weight_dtype(checkpoint: str, quantization: str | None, dtype: str = "auto") -> str:
    """The width vLLM stores a ``checkpoint``-typed model's weights at (a ``WEIGHT_BYTES``
    key); raises ``ValueError`` where it would not load the checkpoint with these flags."""
    if not quantization:
        if checkpoint in _SIXTEEN_BIT and dtype in ("float", "float32"):
            return "float32"  # --dtype float32 casts a 16-bit checkpoint up
        return checkpoint
    if quantization == "gguf":
        raise ValueError("--quantization gguf: GGUF checkpoints are not modelled")
    loads = _METHOD_LOADS.get(quantization)
    if loads is None:
        raise ValueError(f"--quantization {quantization}: not a method the simulator models")
    if checkpoint in loads:
        return checkpoint
    if checkpoint not in QUANTIZED_DTYPES and quantization in _ONLINE:
        return _ONLINE[quantization]
    if checkpoint in QUANTIZED_DTYPES:
        raise ValueError(
            f"Quantization method specified in the model config ({checkpoint}) does not match "
            f"the quantization method specified in the `quantization` argument "
            f"({quantization})."
        )
    raise ValueError(
        f"--quantization {quantization} needs a checkpoint quantized with it; this one is "
        f"{checkpoint}"
    )
