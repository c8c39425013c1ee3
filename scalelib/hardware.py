"""Accelerator specs: the one place where hardware constants live.

Book: "How to Scale Your Model", section 2 (How to Think About TPUs: the spec tables in
"TPU specs"), section 1 (the H100 and v6e figures used in the roofline examples) and the GPU
appendix. Every number elsewhere in scalelib, in the notebooks and in the tests is derived from
these records; nothing else types a FLOPs/s or bytes/s figure in.

Units are in the field names: ``_flops_per_s``, ``_bytes``, ``_bytes_per_s``, ``_s``.
Bandwidths are decimal (1 GB/s = 1e9 bytes/s), as in the book.

ICI convention (book section 2, interconnect table): ``ici_one_way_bytes_per_s`` is what ONE
link carries in ONE direction. The "bidirectional" figure is twice that; it is the rate at
which a chip can push data along one mesh axis when it can use both neighbours on that axis,
which needs a wraparound (a ring). Chapter 3's collective formulas use the bidirectional
number; point-to-point transfers and axes without wraparound use the one-way number.

Where the book gives two values for one quantity we keep the value of its spec table and list
the other in ``BOOK_VARIANTS`` so a notebook can show both (see ``variant``).
GPU chip figures come from the book's GPU part (its spec tables for A100, H100, H200 and B200, its NVLink
table, and Appendix A for GB200 NVL72); the few it does not give (PCIe, the H100's exact 989 TFLOPs/s)
come from NVIDIA's public datasheets (dense, i.e. without structured sparsity) and say so in ``source``.
What only GPUs have (SMs, CUDA cores, SMEM, L2, clocks) lives in :mod:`scalelib.gpus.gpu_specs`, on top of
these records.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from scalelib.validate import non_negative

Dtype = Literal["bf16", "int8"]


@dataclass(frozen=True)
class Chip:
    """One accelerator chip and the system it is packaged in.

    For TPUs ``ici_*`` is the inter-chip interconnect and ``pod_shape`` the largest slice.
    For GPUs ``ici_*`` is NVLink (each GPU reaches every GPU of its node through switches, so
    ``torus`` is False and ``pod_shape`` is the NVLink domain).
    """

    name: str
    family: Literal["tpu", "gpu"]
    bf16_flops_per_s: float
    int8_ops_per_s: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    ici_one_way_bytes_per_s: float  # one link, one direction (GPU: all NVLink of one GPU, one direction)
    ici_links: int  # links per chip (TPU: 4 on a 2D torus, 6 on a 3D torus)
    torus: bool  # TPU-style nearest-neighbour mesh (True) or switched (False)
    pod_shape: tuple[int, ...]
    host_shape: tuple[int, ...]  # chips attached to one CPU host
    cores_per_chip: int
    pcie_bytes_per_s: float  # host <-> one chip, one direction
    dcn_bytes_per_s_per_host: float  # data-centre network, per host, one direction
    wraparound_rule: Literal["full_cube", "axis_16", "full_axis", "switched"]
    ici_hop_latency_s: float = 1e-6
    vpu_flops_per_s: float | None = None
    mxu_dim: int | None = None  # systolic array side (TPU); None for GPUs
    mxus_per_core: int | None = None
    clock_hz: float | None = None  # given by the book for v5e only
    usd_per_hour: float | None = None
    source: str = "book"

    # ---- derived quantities (never stored twice) ----
    @property
    def ici_bidi_bytes_per_s(self) -> float:
        """Both directions of one link: what a chip sends along a wrapped axis per second."""
        return 2 * self.ici_one_way_bytes_per_s

    @property
    def chips_per_host(self) -> int:
        return math.prod(self.host_shape)

    @property
    def pod_chips(self) -> int:
        return math.prod(self.pod_shape)

    def flops_per_s(self, dtype: Dtype = "bf16") -> float:
        """Peak matmul throughput for ``dtype`` (int8 counts integer OPs)."""
        if dtype == "bf16":
            return self.bf16_flops_per_s
        if dtype == "int8":
            return self.int8_ops_per_s
        raise ValueError(f"dtype must be 'bf16' or 'int8', got {dtype!r}")

    @property
    def dcn_bytes_per_s_per_chip(self) -> float:
        """DCN bandwidth divided among the chips of one host."""
        return self.dcn_bytes_per_s_per_host / self.chips_per_host

    @property
    def pod_hosts(self) -> int:
        return self.pod_chips // self.chips_per_host

    @property
    def pod_cores(self) -> int:
        return self.pod_chips * self.cores_per_chip

    @property
    def pod_hbm_bytes(self) -> float:
        return self.pod_chips * self.hbm_bytes

    def pod_flops_per_s(self, dtype: Dtype = "bf16") -> float:
        return self.pod_chips * self.flops_per_s(dtype)

    def has_wraparound(self, slice_shape: tuple[int, ...]) -> tuple[bool, ...]:
        """Which axes of a slice of this chip form a ring (book section 2, "TPU networking").

        * v4p / v5p ("full_cube"): optical switches close every axis, but only for slices built
          from whole 4x4x4 cubes; a 2x2x4 slice has no wraparound. (The book also says "an axis
          which is a multiple of 4" once; we follow the more specific cube rule.)
        * v5e / v6e ("axis_16"): only an axis of the full pod length 16 wraps (an 8x16 wraps
          its long axis only).
        * v3 ("full_axis"): an axis wraps when it spans the whole pod.
        * GPUs ("switched"): no mesh; NVLink switches connect all GPUs of a node.
        """
        if len(slice_shape) > len(self.pod_shape):
            raise ValueError(
                f"{self.name} slices have at most {len(self.pod_shape)} axes, got shape "
                f"{slice_shape}; drop trailing axes of size 1"
            )
        if self.wraparound_rule == "full_cube":
            whole = len(slice_shape) == 3 and all(n % 4 == 0 for n in slice_shape)
            return tuple(whole for _ in slice_shape)
        if self.wraparound_rule == "axis_16":
            return tuple(n == 16 for n in slice_shape)
        if self.wraparound_rule == "full_axis":
            return tuple(n == p for n, p in zip(slice_shape, self.pod_shape))
        return tuple(False for _ in slice_shape)


# ---- TPUs: section 2 spec tables (chip table + interconnect table) ----
TPU_V3 = Chip(
    name="TPU v3", family="tpu",
    bf16_flops_per_s=1.4e14, int8_ops_per_s=1.4e14,
    hbm_bytes=32e9, hbm_bytes_per_s=9.0e11,
    ici_one_way_bytes_per_s=1.0e11, ici_links=4, torus=True,
    pod_shape=(32, 32), host_shape=(4, 2), cores_per_chip=2,
    pcie_bytes_per_s=1.5e10, dcn_bytes_per_s_per_host=2.5e10,
    wraparound_rule="full_axis", mxu_dim=128, mxus_per_core=2,
)
TPU_V4P = Chip(
    name="TPU v4p", family="tpu",
    bf16_flops_per_s=2.75e14, int8_ops_per_s=2.75e14,
    hbm_bytes=32e9, hbm_bytes_per_s=1.2e12,
    ici_one_way_bytes_per_s=4.5e10, ici_links=6, torus=True,
    pod_shape=(16, 16, 16), host_shape=(2, 2, 1), cores_per_chip=2,
    pcie_bytes_per_s=1.6e10, dcn_bytes_per_s_per_host=2.5e10,
    wraparound_rule="full_cube", mxu_dim=128, mxus_per_core=4,
)
TPU_V5P = Chip(
    name="TPU v5p", family="tpu",
    bf16_flops_per_s=4.59e14, int8_ops_per_s=9.18e14,
    hbm_bytes=96e9, hbm_bytes_per_s=2.8e12,
    ici_one_way_bytes_per_s=9.0e10, ici_links=6, torus=True,
    pod_shape=(16, 20, 28), host_shape=(2, 2, 1), cores_per_chip=2,
    pcie_bytes_per_s=1.5e10, dcn_bytes_per_s_per_host=2.5e10,
    wraparound_rule="full_cube", vpu_flops_per_s=7.0e12, mxu_dim=128, mxus_per_core=4, usd_per_hour=4.2,
)
TPU_V5E = Chip(
    name="TPU v5e", family="tpu",
    bf16_flops_per_s=1.97e14, int8_ops_per_s=3.94e14,
    hbm_bytes=16e9, hbm_bytes_per_s=8.1e11,
    ici_one_way_bytes_per_s=4.5e10, ici_links=4, torus=True,
    pod_shape=(16, 16), host_shape=(4, 2), cores_per_chip=1,
    pcie_bytes_per_s=1.5e10, dcn_bytes_per_s_per_host=2.5e10,
    wraparound_rule="axis_16", mxu_dim=128, mxus_per_core=4, clock_hz=1.5e9, usd_per_hour=1.2,
)
TPU_V6E = Chip(
    name="TPU v6e", family="tpu",
    bf16_flops_per_s=9.2e14, int8_ops_per_s=1.84e15,
    hbm_bytes=32e9, hbm_bytes_per_s=1.6e12,
    ici_one_way_bytes_per_s=9.0e10, ici_links=4, torus=True,
    pod_shape=(16, 16), host_shape=(4, 2), cores_per_chip=1,
    pcie_bytes_per_s=1.5e10, dcn_bytes_per_s_per_host=2.5e10,
    wraparound_rule="axis_16", mxu_dim=256,
)

# ---- GPUs: H100 compute and HBM from the book; the rest from NVIDIA datasheets (SXM parts) ----
# NVLink 4/5: 18 links per GPU; 900 GB/s (H100/H200) and 1.8 TB/s (B200) in both directions
# together, so half of that one way. Scale-out: one 400 Gb/s NIC per GPU (5e10 bytes/s).
H100 = Chip(
    name="H100", family="gpu",
    bf16_flops_per_s=9.89e14, int8_ops_per_s=1.979e15,
    hbm_bytes=80e9, hbm_bytes_per_s=3.35e12,
    ici_one_way_bytes_per_s=4.5e11, ici_links=18, torus=False,
    pod_shape=(8,), host_shape=(8,), cores_per_chip=132,
    pcie_bytes_per_s=6.4e10, dcn_bytes_per_s_per_host=8 * 5e10,
    wraparound_rule="switched", usd_per_hour=10.8, source="book+datasheet",
)
H200 = dataclasses.replace(
    H100, name="H200", hbm_bytes=141e9, hbm_bytes_per_s=4.8e12, usd_per_hour=None,
    source="datasheet",
)
B200 = Chip(
    name="B200", family="gpu",
    bf16_flops_per_s=2.25e15, int8_ops_per_s=4.5e15,
    hbm_bytes=192e9, hbm_bytes_per_s=8.0e12,
    ici_one_way_bytes_per_s=9.0e11, ici_links=18, torus=False,
    pod_shape=(8,), host_shape=(8,), cores_per_chip=148,
    pcie_bytes_per_s=6.4e10, dcn_bytes_per_s_per_host=8 * 5e10,
    wraparound_rule="switched", source="book (GPU part)+datasheet",
)
# The book's GPU part (spec tables, NVLink table): an A100 node joins 8 GPUs with 12 NVLink 3 ports each.
A100 = Chip(
    name="A100", family="gpu",
    bf16_flops_per_s=3.1e14, int8_ops_per_s=6.2e14,
    hbm_bytes=80e9, hbm_bytes_per_s=2.0e12,
    ici_one_way_bytes_per_s=3.0e11, ici_links=12, torus=False,
    pod_shape=(8,), host_shape=(8,), cores_per_chip=108,
    pcie_bytes_per_s=3.2e10, dcn_bytes_per_s_per_host=8 * 2.5e10,
    wraparound_rule="switched", source="book (GPU part)+datasheet",
)
# GB200 NVL72 (the GPU part's Appendix A): B200 GPUs in one 72-GPU NVLink domain, 8 GPUs per CPU host,
# one 400 Gb/s NIC per GPU, so the domain egresses 72 x 50 GB/s = 3.6 TB/s into the scale-out network.
GB200 = dataclasses.replace(
    B200, name="GB200", pod_shape=(72,), source="book (GPU part, Appendix A)",
)

# Section 2: VMEM feeds the MXUs about 22x faster than HBM does.
VMEM_TO_HBM_BANDWIDTH_RATIO = 22.0
# Section 2, VPU: a vector register is 8 sublanes x 128 lanes, with 2 ALUs per (sublane, lane).
VPU_SUBLANES, VPU_LANES, VPU_ALUS_PER_LANE = 8, 128, 2
# v5 doubles that: it adds 4 pairs of f32 per (sublane, lane) each cycle (section 2), the "4 independently
# programmable 8x128 units" of the GPU part's comparison.
VPU_ALUS_PER_LANE_V5 = 4


def vpu_alus(alus_per_lane: int = VPU_ALUS_PER_LANE) -> int:
    """Floating-point ALUs of one TensorCore's VPU (v4 by default; ``VPU_ALUS_PER_LANE_V5`` for v5)."""
    return VPU_SUBLANES * VPU_LANES * alus_per_lane


def mxu_flops_per_s(mxu_dim: int, clock_hz: float) -> float:
    """Peak FLOPs/s of one MXU (section 2): a bf16[8, D] @ bf16[D, D] product every 8 cycles,
    i.e. D * D multiply-adds (2 D^2 FLOPs) per cycle."""
    return 2 * mxu_dim * mxu_dim * clock_hz


def chip_flops_from_mxus(chip: Chip) -> float:
    """A chip's peak rebuilt from its MXUs: cores x MXUs per core x one MXU's rate."""
    if chip.mxu_dim is None or chip.mxus_per_core is None or chip.clock_hz is None:
        raise ValueError(f"{chip.name}: the book does not give its MXU size, count and clock")
    return chip.cores_per_chip * chip.mxus_per_core * mxu_flops_per_s(chip.mxu_dim, chip.clock_hz)


@dataclass(frozen=True)
class CoreFigures:
    """An accelerator the book gives only per-core figures for, not a spec-table row.

    Section 9's worked profile runs on the 8 cores of a TPU v2 (a Colab ``v2-8``, 4 x 2 cores) and uses
    two numbers: one core's bf16 peak and one axis's bidirectional ICI bandwidth. ``topology.ring_axis``
    turns it into an axis of the collectives' cost model, as it does for a ``Chip``.
    """

    name: str
    bf16_flops_per_s: float  # one core
    ici_bidi_bytes_per_s: float  # one mesh axis, both directions
    ici_hop_latency_s: float = 0.0  # the book's profile arithmetic ignores hop latency
    torus: bool = True

    @property
    def ici_one_way_bytes_per_s(self) -> float:
        return self.ici_bidi_bytes_per_s / 2


TPU_V2_CORE = CoreFigures(name="TPU v2 core", bf16_flops_per_s=23e12, ici_bidi_bytes_per_s=1.2e11)

CHIPS: dict[str, Chip] = {c.name: c for c in (TPU_V3, TPU_V4P, TPU_V5P, TPU_V5E, TPU_V6E, A100, H100, H200, B200,
                                                GB200)}

# Values the book uses elsewhere for the same quantity (section and reason). A chapter that
# reproduces the book's own arithmetic uses ``variant(chip, field)``.
BOOK_VARIANTS: dict[tuple[str, ...], tuple[float, str]] = {
    ("TPU v5e", "hbm_bytes_per_s"): (8.2e11, "section 1 uses 8.2e11 to reach 240 FLOPs/byte"),
    ("TPU v5p", "hbm_bytes_per_s"): (2.5e12, "section 2 prose"),
    ("TPU v5p", "bf16_flops_per_s"): (4.5e14, "section 5 and Solution 2.2 round to 4.5e14"),
    ("TPU v6e", "bf16_flops_per_s"): (9.1e14, "section 1 prose"),
    ("TPU v4p", "hbm_bytes_per_s"): (1.23e12, "Solution 2.1"),
    ("TPU v5e", "int8_ops_per_s"): (4.0e14, "section 2 prose, rounded"),
    ("TPU v6e", "pcie_bytes_per_s"): (3.2e10, "section 2 footnote (Exercise 2.3 uses 1.5e10)"),
    ("H100", "bf16_flops_per_s"): (1.0e15, "Solution 1.5 halves the 1.979e15 sparse figure"),
    # The GPU part rounds: its spec table and text use 990 TFLOPs/s for H100 and H200 (the datasheet: 989.4).
    ("H100", "bf16_flops_per_s", "gpu part"): (9.9e14, "the GPU part's spec table and rooflines"),
    ("H200", "bf16_flops_per_s", "gpu part"): (9.9e14, "the GPU part's spec table"),
    ("H100", "hbm_bytes_per_s", "gpu part"): (3.4e12, "the GPU part's spec table (its text uses 3.35e12)"),
    ("B200", "bf16_flops_per_s"): (2.3e15, "the GPU part's spec table and Quiz 1 Q4 (its text uses 2.25e15)"),
    ("B200", "hbm_bytes_per_s"): (9.0e12, "the GPU part's memory section (its table and quizzes use 8e12)"),
}


def variant(chip: Chip, field: str, where: str | None = None) -> Chip:
    """``chip`` with ``field`` set to the other value the book uses for it (``where``: which part, when the book
    uses more than one other value, e.g. ``"gpu part"``)."""
    key: tuple[str, ...] = (chip.name, field) if where is None else (chip.name, field, where)
    if key not in BOOK_VARIANTS:
        known = sorted(" ".join(k[1:]) for k in BOOK_VARIANTS if k[0] == chip.name)
        raise KeyError(
            f"the book gives no second value for {chip.name}.{field}; "
            f"fields with a variant for this chip: {known or 'none'}"
        )
    changes: dict[str, Any] = {field: BOOK_VARIANTS[key][0]}
    return dataclasses.replace(chip, **changes)


def get_chip(name: str) -> Chip:
    """Look a chip up by name, forgiving case and the 'TPU ' prefix ('v5e', 'h100')."""
    wanted = name.lower().replace("tpu", "").replace(" ", "").replace("_", "")
    for chip in CHIPS.values():
        if chip.name.lower().replace("tpu", "").replace(" ", "") == wanted:
            return chip
    raise KeyError(f"unknown chip {name!r}; known chips: {', '.join(CHIPS)}")


def chips_to_hold(total_bytes: float, chip: Chip) -> float:
    """Chips' worth of HBM that ``total_bytes`` fill (a fraction: 8.75 for 140 GB on v5e)."""
    return non_negative("total_bytes", total_bytes) / chip.hbm_bytes


def min_chips_to_hold(total_bytes: float, chip: Chip) -> int:
    """Fewest whole chips whose HBM holds ``total_bytes`` spread evenly, at least one (sections 6.2, 8.1)."""
    return max(1, math.ceil(chips_to_hold(total_bytes, chip) - 1e-9))
