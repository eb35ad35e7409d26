"""GPU facts: the one place a GPU's memory, bandwidth, FLOP/s and interconnect are stated.

Guarantees:

- Every profile names its datasheet. Throughput is the vendor's *dense* (no sparsity) tensor
  figure per precision, bandwidth the peak memory bandwidth, per GPU: BF16 always; FP8 where
  the GPU has FP8 tensor cores (Ada, Hopper, Blackwell; ``None`` on Ampere); FP4 on
  Blackwell only. ``tensor_tflops`` answers for a precision, ``None`` where the GPU has no
  tensor cores for it.
- Memory is stated twice, in the two units that mean different things: ``marketing_gb`` is
  the "80GB" of the product name (10^9 bytes, rounded), ``memory_gib`` the total that CUDA
  reports to PyTorch and vLLM (``torch.cuda.mem_get_info``, printed by an OOM as "GPU 0 has a
  total capacity of … GiB"). Every memory calculation uses ``memory_gib``; the product name
  is for labels only.
- ``nvlink_domain`` is how many GPUs one NVLink fabric joins (8 on an HGX board, 72 in an
  NVL72 rack; None for PCIe boards): GPUs beyond it talk over the network, not ``link_gbps``.
- ``gpu_profile`` finds a profile by name, alias or Runpod id, or raises ``ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
# How much GPUs of one type differ in speed from pod to pod (clocks, the unit, fresh kernel
# state): the relative standard deviation of a re-run on another pod. The simulator's noise
# draws each pod's speed with it, and every interval a level reports includes it, so that an
# interval claims what a re-run would show. Sources: docs/simulator.md, "Noise".
POD_SPEED_SPREAD = 0.02


@dataclass(frozen=True)
class GpuProfile:
    """One GPU model. ``link_gbps`` is the per-GPU bandwidth between GPUs for tensor
    parallelism (NVLink where the board has it, else PCIe)."""

    name: str
    runpod_id: str
    bf16_tflops: float
    bandwidth_tbps: float
    marketing_gb: int
    memory_gib: float
    link_gbps: float
    source: str
    aliases: tuple[str, ...] = ()
    fp8_tflops: float | None = None
    fp4_tflops: float | None = None
    nvlink_domain: int | None = None

    def tensor_tflops(self, precision: str) -> float | None:
        """Dense tensor-core TFLOP/s for ``"bf16"``, ``"fp8"`` or ``"fp4"`` operands."""
        return {"bf16": self.bf16_tflops, "fp8": self.fp8_tflops, "fp4": self.fp4_tflops}[precision]

    @property
    def memory_bytes(self) -> float:
        """The usable total, as vLLM sees it (``gpu_memory_utilization`` is a share of it)."""
        return self.memory_gib * GIB


# memory_gib: the "total capacity" PyTorch prints in CUDA out-of-memory errors on these boards
# (public logs, 2024-2026); it varies by about 0.1 GiB with driver and ECC settings.
GPUS = (
    GpuProfile(
        "H100 SXM",
        "NVIDIA H100 80GB HBM3",
        989.0,
        3.35,
        80,
        79.19,
        450,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column: BF16 1,979 and FP8 3,958 "
        "TFLOPS with sparsity, half that dense, 3.35 TB/s, 80 GB, NVLink 900 GB/s)",
        ("h100", "h100-sxm", "h100sxm"),
        fp8_tflops=1979.0,
        nvlink_domain=8,
    ),
    GpuProfile(
        "H200",
        "NVIDIA H200",
        989.0,
        4.8,
        141,
        139.80,
        450,
        "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM: BF16 1,979 and FP8 3,958 TFLOPS "
        "with sparsity, 4.8 TB/s, 141 GB, NVLink 900 GB/s)",
        ("h200", "h200-sxm"),
        fp8_tflops=1979.0,
        nvlink_domain=8,
    ),
    GpuProfile(
        "B200",
        "NVIDIA B200",
        2250.0,
        8.0,
        180,
        178.35,
        900,
        "NVIDIA HGX B200 datasheet (8 GPUs: FP16/BF16 36, FP8 72, FP4 144 PFLOPS with "
        "sparsity, 1.4 TB HBM3e, 64 TB/s; per GPU 2.25 / 4.5 / 9 PFLOPS dense, 180 GB, 8 TB/s; "
        "NVLink 1.8 TB/s); the same dense figures per GPU in NVIDIA's Blackwell technical "
        "brief as copied by datacrunch.io ('B300 vs B200') and glennklockwood.com (B200, HGX "
        "at 1,000 W)",
        ("b200",),
        fp8_tflops=4500.0,
        fp4_tflops=9000.0,
        nvlink_domain=8,
    ),
    GpuProfile(
        "B300",
        "NVIDIA B300 SXM6 AC",
        2250.0,
        8.0,
        288,
        267.69,
        900,
        "NVIDIA HGX B300 specifications, as copied by third parties (NVIDIA's own datasheet "
        "was not among the stored sources): 8 GPUs FP16/BF16 36 PFLOPS with sparsity "
        "(fibermall.com HGX B300 overview), so 2.25 PFLOPS dense per GPU; 288 GB HBM3e and "
        "up to 8 TB/s per GPU, NVLink 5 1.8 TB/s both directions (acecloud.ai 'NVIDIA HGX "
        "B300: Specs'; glennklockwood.com B300). FP8 4,500 and FP4 13,125 TFLOPS dense per "
        "GPU (glennklockwood.com B300, HGX variant; datacrunch.io gives FP4 14 PFLOPS). "
        "memory_gib: PyTorch OOMs on B300 report a "
        "total capacity of 267.69 GiB (nvidia-smi 275040 MiB). Runpod id as its gpuTypes "
        "lists it (third-party snapshot)",
        ("b300", "b300-sxm", "b300-sxm6"),
        fp8_tflops=4500.0,
        fp4_tflops=13125.0,
        nvlink_domain=8,
    ),
    GpuProfile(
        "GB200",
        "NVIDIA GB200",
        2500.0,
        8.0,
        186,
        185.03,
        900,
        "The GB200 NVL72's Blackwell GPU, NVIDIA's figures as third parties copied them "
        "(NVIDIA's own datasheet was not among the stored sources): dense matrix TFLOP/s BF16 "
        "2,500, FP8 5,000, FP4 10,000 and 8 TB/s per GPU (glennklockwood.com/garden/"
        "processors/B200, the GB200 variant at 1,200 W); 186 GB HBM3e per GPU (MLCommons "
        "inference v6.1, Crusoe GB200-NVL72 system description); NVLink 5 1.8 TB/s both "
        "directions, 72 GPUs in one NVLink domain (NVL72). memory_gib: nvidia-smi's total on "
        "GB200 nodes, 189,471 MiB (public logs); PyTorch's total is a little lower (0.5-0.9 "
        "GiB on H100 and B300), not found published",
        ("gb200", "gb200-nvl72"),
        fp8_tflops=5000.0,
        fp4_tflops=10000.0,
        nvlink_domain=72,
    ),
    GpuProfile(
        "GB300",
        "NVIDIA GB300",
        2500.0,
        8.0,
        279,
        277.55,
        900,
        "The GB300 NVL72's Blackwell Ultra GPU, per-GPU specifications without sparsity as "
        "verda.com copied them ('GB300 NVL72 architecture'): FP4 15 PFLOPS, FP8 5 PFLOPS, "
        "FP16/BF16 2.5 PFLOPS, 279 GB HBM3E, 8 TB/s (the rack's 20 TB and 576 TB/s over 72 "
        "GPUs agree: glennklockwood.com B300; Google Cloud's A4X Max: 'roughly 279 GB per "
        "GPU'); NVLink 5 1.8 TB/s both directions, 72 GPUs in one NVLink domain. memory_gib: "
        "nvidia-smi's total on GB300 nodes, 284,208 MiB (public logs); PyTorch's is a little "
        "lower, not found published",
        ("gb300", "gb300-nvl72"),
        fp8_tflops=5000.0,
        fp4_tflops=15000.0,
        nvlink_domain=72,
    ),
    GpuProfile(
        "A100 80GB",
        "NVIDIA A100-SXM4-80GB",
        312.0,
        2.039,
        80,
        79.15,
        300,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM: BF16 312 TFLOPS dense, "
        "2,039 GB/s, NVLink 600 GB/s; no FP8 tensor cores)",
        ("a100", "a100-80gb", "a100-sxm"),
        nvlink_domain=8,
    ),
    GpuProfile(
        "A100 80GB PCIe",
        "NVIDIA A100 80GB PCIe",
        312.0,
        1.935,
        80,
        79.15,
        32,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB PCIe: BF16 312 TFLOPS dense, "
        "1,935 GB/s, PCIe Gen4 64 GB/s both directions)",
        ("a100-pcie", "a100-80gb-pcie"),
    ),
    GpuProfile(
        "A100 40GB",
        "NVIDIA A100-SXM4-40GB",
        312.0,
        1.555,
        40,
        39.39,
        300,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM: BF16 312 TFLOPS dense, "
        "1,555 GB/s, NVLink 600 GB/s)",
        ("a100-40gb", "a100-sxm4-40gb"),
        nvlink_domain=8,
    ),
    GpuProfile(
        "L40S",
        "NVIDIA L40S",
        362.05,
        0.864,
        48,
        44.39,
        32,
        "NVIDIA L40S datasheet (BF16 362.05 TFLOPS dense / 733 with sparsity, FP8 733 dense / "
        "1,466 with sparsity, 48 GB GDDR6, 864 GB/s, PCIe Gen4 x16 64 GB/s both directions)",
        ("l40s",),
        fp8_tflops=733.0,
    ),
    GpuProfile(
        "RTX 4090",
        "NVIDIA GeForce RTX 4090",
        165.2,
        1.008,
        24,
        23.65,
        32,
        "NVIDIA Ada GPU architecture whitepaper, Appendix A (RTX 4090: BF16 with FP32 "
        "accumulate 165.2 TFLOPS dense, 24 GB GDDR6X, 1,008 GB/s; PCIe Gen4). FP8 330.3 "
        "TFLOPS dense with FP32 accumulate, as vLLM's CUTLASS FP8 GEMMs accumulate "
        "(waredb.com RTX 4090; gigagpu.com's 660.6 is the FP16-accumulate rate)",
        ("4090", "rtx4090", "rtx-4090"),
        fp8_tflops=330.3,
    ),
)


def _key(text: str) -> str:
    return text.lower().replace(" ", "").replace("_", "-")


def gpu_profile(name: str) -> GpuProfile:
    """Finds a profile by name, alias or Runpod id, ignoring case and spaces."""
    wanted = _key(name)
    for gpu in GPUS:
        if wanted in {_key(gpu.name), _key(gpu.runpod_id), *(_key(a) for a in gpu.aliases)}:
            return gpu
    known = ", ".join(gpu.name for gpu in GPUS)
    raise ValueError(f"unknown GPU {name!r}; known: {known}")
