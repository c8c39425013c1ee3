"""Inside one NVIDIA GPU: SMs, CUDA cores, Tensor Cores, registers, SMEM, L2, HBM, and the NVLink generations.

Book: the GPU part, "What Is a GPU?" (SMs and their four subpartitions, CUDA cores, Tensor Cores), "Memory"
(registers, SMEM, L2, HBM), "Summary of GPU specs" (the two spec tables), "GPUs vs. TPUs at the chip level",
and "At the node level" (the NVLink generations table).

A :class:`GpuSpec` adds what only a GPU has to the :class:`scalelib.hardware.Chip` record that the rest of the
library uses (bf16 FLOPs/s, HBM size and bandwidth, NVLink egress), so those figures exist once. Byte sizes
of on-chip memories are binary (the book's "256kB" of SMEM is 256 KiB); bandwidths and HBM sizes are decimal.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scalelib import hardware as hw
from scalelib.validate import positive, positive_int

KIB, MIB = 2**10, 2**20
THREADS_PER_WARP = 32
REGISTER_BYTES = 4  # every register holds one 32-bit word
FLOPS_PER_FMA = 2  # a fused multiply-add counts as two FLOPs (datasheets count it so)


@dataclass(frozen=True)
class NvlinkGeneration:
    """One row of the book's NVLink table: how GPUs of one generation join their node."""

    version: str
    nvswitch_version: str
    gpu_generation: str
    link_bytes_per_s: float  # one NVLink port, one direction ("full-duplex X GB/s" means X each way)
    ports_per_gpu: int
    node_gpus: tuple[int, ...]  # NVLink domain sizes sold (Blackwell: 8, or 72 for GB200 NVL72)
    nvswitches_per_node: tuple[int, ...]  # NVSwitch chips per node, one per entry of ``node_gpus``

    @property
    def gpu_egress_bytes_per_s(self) -> float:
        """All NVLink ports of one GPU, one direction: what one GPU can push into its node."""
        return self.ports_per_gpu * self.link_bytes_per_s


NVLINK_3 = NvlinkGeneration("3.0", "2.0", "Ampere", 25e9, 12, (8,), (6,))
NVLINK_4 = NvlinkGeneration("4.0", "3.0", "Hopper", 25e9, 18, (8,), (4,))
NVLINK_5 = NvlinkGeneration("5.0", "4.0", "Blackwell", 50e9, 18, (8, 72), (2, 18))
NVLINK_GENERATIONS = (NVLINK_3, NVLINK_4, NVLINK_5)


@dataclass(frozen=True)
class GpuSpec:
    """One GPU as the book's spec tables describe it.

    ``chip`` carries the figures shared with the TPU tables (None for V100, whose bf16 row the book leaves
    empty). Each SM has ``subpartitions_per_sm`` identical quarters, each with one Tensor Core, one warp
    scheduler driving ``fp32_cores_per_subpartition`` CUDA cores, and a register file.
    """

    name: str
    generation: str
    chip: hw.Chip | None
    sms: int
    clock_hz: tuple[float, float] | None  # (base, boost); the book's table leaves B200's empty
    smem_per_sm_bytes: int
    l2_bytes: int
    hbm_bytes: float
    tc_flops_per_cycle: int  # bf16 FLOPs one Tensor Core does per cycle (the book's estimate)
    fp8_flops_per_s: float | None = None  # the table rounds H100's 1.979e15 to 2.0e15
    fp4_flops_per_s: float | None = None
    vector_fp32_fma_flops_per_s: float | None = None  # CUDA cores, counting an FMA as two FLOPs (datasheet)
    nvlink: NvlinkGeneration | None = None
    tmem_per_sm_bytes: int = 0  # Blackwell's Tensor Memory
    register_file_per_sm_bytes: int = 256 * KIB
    subpartitions_per_sm: int = 4
    fp32_cores_per_subpartition: int = 32
    source: str = "book (GPU part)"

    # ---- counts ----
    @property
    def tensor_cores(self) -> int:
        """One Tensor Core per subpartition."""
        return self.sms * self.subpartitions_per_sm

    @property
    def simd_units(self) -> int:
        """Independent 32-wide warp schedulers (528 on an H100, against 8 VPU slots on a TPU v5p)."""
        return self.sms * self.subpartitions_per_sm

    @property
    def fp32_cores_per_sm(self) -> int:
        return self.subpartitions_per_sm * self.fp32_cores_per_subpartition

    @property
    def cuda_cores(self) -> int:
        """fp32 CUDA cores (ALUs) on the chip."""
        return self.sms * self.fp32_cores_per_sm

    # ---- rates ----
    @property
    def bf16_flops_per_s(self) -> float:
        if self.chip is None:
            raise ValueError(f"the book gives no bf16 FLOPs/s for {self.name}")
        return self.chip.bf16_flops_per_s

    @property
    def hbm_bytes_per_s(self) -> float:
        if self.chip is None:
            raise ValueError(f"{self.name} has no Chip record; use its spec table row")
        return self.chip.hbm_bytes_per_s

    @property
    def boost_clock_hz(self) -> float:
        if self.clock_hz is None:
            raise ValueError(f"the book's table gives no clock for {self.name}; pass clock_hz explicitly")
        return self.clock_hz[1]

    def vector_flops_per_s(self, clock_hz: float | None = None, fma: bool = False) -> float:
        """CUDA-core fp32 FLOPs/s: one op per core per cycle, or two with FMA (how datasheets count)."""
        clock = self.boost_clock_hz if clock_hz is None else positive("clock_hz", clock_hz)
        return self.cuda_cores * clock * (FLOPS_PER_FMA if fma else 1)

    def sms_used(self, elements: int) -> int:
        """SMs an elementwise kernel of ``elements`` items keeps busy with one item per CUDA core: at most every SM
        (1024 fp32 items fill only 8 of an H100's 132 SMs; the book's Quiz 1, Q7)."""
        elements = positive_int("elements", elements)
        return min(-(-elements // self.fp32_cores_per_sm), self.sms)

    def clock_from_vector_flops(self, fma_flops_per_s: float) -> float:
        """The clock that a datasheet's FMA-counted vector FLOPs/s implies (the book's Quiz 1, Q6)."""
        return positive("fma_flops_per_s", fma_flops_per_s) / (self.cuda_cores * FLOPS_PER_FMA)

    def tc_flops_per_cycle_from(self, bf16_flops_per_s: float, clock_hz: float) -> float:
        """bf16 FLOPs per Tensor Core per cycle implied by a chip rate and a clock (about 1024 on H100)."""
        return positive("bf16_flops_per_s", bf16_flops_per_s) / (self.tensor_cores * positive("clock_hz", clock_hz))

    def flops_per_sm(self, bf16_flops_per_s: float | None = None) -> float:
        return (self.bf16_flops_per_s if bf16_flops_per_s is None else bf16_flops_per_s) / self.sms

    def critical_intensity(self, precision: str = "bf16", hbm_bytes_per_s: float | None = None) -> float:
        """FLOPs per HBM byte above which a kernel is compute bound (bf16, fp8 or the CUDA cores' "vector")."""
        rates = {"bf16": self.chip.bf16_flops_per_s if self.chip else None, "fp8": self.fp8_flops_per_s,
                 "vector": self.vector_flops_per_s() if self.clock_hz else None}
        if precision not in rates:
            raise ValueError(f"precision must be one of {sorted(rates)}, got {precision!r}")
        flops = rates[precision]
        if flops is None:
            raise ValueError(f"the book gives no {precision} rate for {self.name}")
        return flops / (self.hbm_bytes_per_s if hbm_bytes_per_s is None else hbm_bytes_per_s)

    # ---- memories ----
    @property
    def smem_bytes(self) -> int:
        """SMEM of all SMs together (32 MiB on an H100, against 128 MiB of VMEM on a TPU v5p)."""
        return self.sms * self.smem_per_sm_bytes

    @property
    def register_bytes(self) -> int:
        """Registers of all SMs together."""
        return self.sms * self.register_file_per_sm_bytes

    @property
    def registers_per_subpartition(self) -> int:
        return self.register_file_per_sm_bytes // (self.subpartitions_per_sm * REGISTER_BYTES)

    def resident_warps(self, registers_per_thread: int) -> int:
        """Warps whose registers fit in one SM's register file at once (8 at 256 registers a thread)."""
        registers_per_thread = positive_int("registers_per_thread", registers_per_thread)
        return self.register_file_per_sm_bytes // (REGISTER_BYTES * THREADS_PER_WARP * registers_per_thread)


V100 = GpuSpec("V100", "Volta", None, sms=80, clock_hz=(1.25e9, 1.38e9), smem_per_sm_bytes=96 * KIB,
               l2_bytes=6 * MIB, hbm_bytes=32e9, tc_flops_per_cycle=256)
A100 = GpuSpec("A100", "Ampere", hw.A100, sms=108, clock_hz=(1.10e9, 1.41e9), smem_per_sm_bytes=192 * KIB,
               l2_bytes=40 * MIB, hbm_bytes=80e9, tc_flops_per_cycle=512, fp8_flops_per_s=6.2e14, nvlink=NVLINK_3)
H100 = GpuSpec("H100", "Hopper", hw.H100, sms=132, clock_hz=(1.59e9, 1.98e9), smem_per_sm_bytes=256 * KIB,
               l2_bytes=50 * MIB, hbm_bytes=80e9, tc_flops_per_cycle=1024, fp8_flops_per_s=hw.H100.int8_ops_per_s,
               vector_fp32_fma_flops_per_s=66e12, nvlink=NVLINK_4)
H200 = GpuSpec("H200", "Hopper", hw.H200, sms=132, clock_hz=(1.59e9, 1.98e9), smem_per_sm_bytes=256 * KIB,
               l2_bytes=50 * MIB, hbm_bytes=141e9, tc_flops_per_cycle=1024, fp8_flops_per_s=hw.H200.int8_ops_per_s,
               nvlink=NVLINK_4)
B200 = GpuSpec("B200", "Blackwell", hw.B200, sms=148, clock_hz=None, smem_per_sm_bytes=256 * KIB,
               l2_bytes=126 * MIB, hbm_bytes=192e9, tc_flops_per_cycle=2048, fp8_flops_per_s=4.5e15,
               fp4_flops_per_s=9.0e15, vector_fp32_fma_flops_per_s=80e12, nvlink=NVLINK_5, tmem_per_sm_bytes=256 * KIB)
GB200 = GpuSpec("GB200", "Blackwell", hw.GB200, sms=148, clock_hz=None, smem_per_sm_bytes=256 * KIB,
                l2_bytes=126 * MIB, hbm_bytes=192e9, tc_flops_per_cycle=2048, fp8_flops_per_s=4.5e15,
                fp4_flops_per_s=9.0e15, vector_fp32_fma_flops_per_s=80e12, nvlink=NVLINK_5,
                tmem_per_sm_bytes=256 * KIB, source="book (GPU part, Appendix A): B200 GPUs in an NVL72 rack")

# The export version of the H100 that DeepSeek V3 trained on: the same chip with NVLink cut to 300 GB/s a GPU
# (the book's figure; 12 NVLink 4 ports' worth).
H800 = dataclasses.replace(
    H100, name="H800", chip=dataclasses.replace(hw.H100, name="H800", ici_one_way_bytes_per_s=3e11, ici_links=12),
    nvlink=NvlinkGeneration("4.0", "3.0", "Hopper", 25e9, 12, (8,), (4,)), source="book (GPU part, Examples)")

GPUS: dict[str, GpuSpec] = {g.name: g for g in (V100, A100, H100, H200, H800, B200, GB200)}

# Clocks the book uses for one computation rather than for the table (Tensor Core footnote, Quiz 1 Q6).
TC_CLOCK_HZ = {"H100": 1.76e9, "B200": 1.86e9, "A100": 1.41e9}
# A measurement the book quotes (chipsandcheese): H100 L2 bandwidth, one direction.
H100_L2_BYTES_PER_S = 5.5e12


def get_gpu(name: str) -> GpuSpec:
    """Look a GPU up by name, forgiving case ('h100')."""
    for gpu in GPUS.values():
        if gpu.name.lower() == name.strip().lower():
            return gpu
    raise KeyError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)}")


def tpu_vpu_alus(chip: hw.Chip) -> int:
    """VPU ALUs of a v5-generation TPU chip: per TensorCore, 4 ALUs on each of 8 sublanes x 128 lanes."""
    return chip.cores_per_chip * hw.vpu_alus(hw.VPU_ALUS_PER_LANE_V5)
