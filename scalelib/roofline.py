"""Roofline cost model: how long an operation takes when it is bound by compute or by bytes.

Book section 1 (All About Rooflines). An operation that does ``flops`` of arithmetic and moves
``bytes`` over a channel of ``bytes_per_s`` on a chip doing ``flops_per_s`` takes at least
``max(T_math, T_comms)`` (perfect overlap) and at most ``T_math + T_comms`` (no overlap), where
``T_math = flops / flops_per_s`` and ``T_comms = bytes / bytes_per_s``. The channel is HBM for
memory-bound kernels and ICI / PCIe / DCN for network-bound ones: the model is the same.

Arithmetic intensity is ``flops / bytes``; the chip's critical intensity is
``flops_per_s / bytes_per_s``. An op whose intensity exceeds it is compute-bound.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Mapping

from scalelib.hardware import Chip, Dtype
from scalelib.validate import positive


@dataclass(frozen=True)
class OpCost:
    """Work of one operation: arithmetic and bytes moved."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return arithmetic_intensity(self.flops, self.bytes)


@dataclass(frozen=True)
class RooflineTime:
    """Time of an op on a chip/channel pair, split into its two parts."""

    compute_s: float
    comms_s: float

    @property
    def lower_bound_s(self) -> float:
        """Compute and communication fully overlapped."""
        return max(self.compute_s, self.comms_s)

    @property
    def upper_bound_s(self) -> float:
        """Compute and communication one after the other."""
        return self.compute_s + self.comms_s

    @property
    def bound(self) -> str:
        """'compute' when arithmetic is the slower part, else 'comms'."""
        return "compute" if self.compute_s >= self.comms_s else "comms"


def compute_time_s(flops: float, flops_per_s: float) -> float:
    """Seconds to do ``flops`` at ``flops_per_s`` (T_math)."""
    if flops < 0:
        raise ValueError(f"flops must be >= 0, got {flops!r}")
    return flops / positive("flops_per_s", flops_per_s)


def comms_time_s(num_bytes: float, bytes_per_s: float) -> float:
    """Seconds to move ``num_bytes`` over a channel of ``bytes_per_s`` (T_comms)."""
    if num_bytes < 0:
        raise ValueError(f"num_bytes must be >= 0, got {num_bytes!r}")
    return num_bytes / positive("bytes_per_s", bytes_per_s)


def roofline_time(flops: float, num_bytes: float, flops_per_s: float, bytes_per_s: float) -> RooflineTime:
    """T_math and T_comms of one op; read ``lower_bound_s`` / ``upper_bound_s`` from the result."""
    return RooflineTime(compute_time_s(flops, flops_per_s), comms_time_s(num_bytes, bytes_per_s))


def op_time_on_chip(cost: OpCost, chip: Chip, dtype: Dtype = "bf16") -> RooflineTime:
    """Roofline time of ``cost`` on ``chip`` with operands streamed from HBM."""
    return roofline_time(cost.flops, cost.bytes, chip.flops_per_s(dtype), chip.hbm_bytes_per_s)


def arithmetic_intensity(flops: float, num_bytes: float) -> float:
    """FLOPs per byte."""
    return flops / positive("num_bytes", num_bytes)


def critical_intensity(flops_per_s: float, bytes_per_s: float) -> float:
    """Intensity above which an op is compute-bound on this compute/channel pair."""
    return positive("flops_per_s", flops_per_s) / positive("bytes_per_s", bytes_per_s)


def chip_critical_intensity(chip: Chip, dtype: Dtype = "bf16") -> float:
    """Critical intensity of ``chip`` against its HBM."""
    return critical_intensity(chip.flops_per_s(dtype), chip.hbm_bytes_per_s)


def attainable_flops_per_s(intensity: float, flops_per_s: float, bytes_per_s: float) -> float:
    """The roofline itself: min(peak, intensity * bandwidth)."""
    return min(flops_per_s, intensity * bytes_per_s)


# ---------------------------------------------------------------- ops from shapes

_EINSUM = re.compile(r"^\s*([a-zA-Z]*(?:\s*,\s*[a-zA-Z]*)*)\s*->\s*([a-zA-Z]*)\s*$")


def einsum_cost(spec: str, sizes: Mapping[str, int], dtype_bytes: float | Mapping[str, float] = 2) -> OpCost:
    """FLOPs and HBM bytes of a contraction written as an einsum, e.g. ``"bd,df->bf"``.

    FLOPs are 2 (multiply and add) times the product of every distinct index's size; bytes are
    every operand read once plus the output written once. ``dtype_bytes`` is one size for all
    arrays, or a mapping from operand/output term (``"bd"``) to its element size.
    """
    match = _EINSUM.match(spec)
    if not match:
        raise ValueError(f"einsum spec must look like 'bd,df->bf', got {spec!r}")
    inputs = [t.strip() for t in match.group(1).split(",")]
    output = match.group(2)
    terms = inputs + [output]
    indices = set("".join(terms))
    missing = sorted(indices - set(sizes))
    if missing:
        raise ValueError(f"sizes has no entry for index {missing} of {spec!r}; give every index a size")
    for term in terms:
        if len(set(term)) != len(term):
            raise ValueError(f"term {term!r} of {spec!r} repeats an index; traces are not supported")
    if not set(output) <= set("".join(inputs)):
        raise ValueError(f"output {output!r} of {spec!r} has an index that no input has")

    def elem_bytes(term: str) -> float:
        return dtype_bytes[term] if isinstance(dtype_bytes, Mapping) else dtype_bytes

    flops = 2 * math.prod(sizes[i] for i in indices)
    num_bytes = sum(math.prod(sizes[i] for i in term) * elem_bytes(term) for term in terms)
    return OpCost(flops=float(flops), bytes=float(num_bytes))


def matmul_cost(batch: int, d: int, f: int, act_bytes: float = 2, weight_bytes: float = 2,
                out_bytes: float | None = None) -> OpCost:
    """x[B, D] @ W[D, F] -> y[B, F]: 2BDF FLOPs, BD + DF + BF elements moved."""
    out_bytes = act_bytes if out_bytes is None else out_bytes
    return einsum_cost("bd,df->bf", {"b": batch, "d": d, "f": f},
                       {"bd": act_bytes, "df": weight_bytes, "bf": out_bytes})


def matmul_critical_batch(flops_per_s: float, bytes_per_s: float, weight_bytes: float = 2,
                          d: int | None = None, f: int | None = None, act_bytes: float | None = None) -> float:
    """Batch (tokens) above which x[B, D] @ W[D, F] is compute-bound.

    Without ``d``/``f`` this is the B << D, F limit of section 1: bytes ~ weight_bytes * DF and
    FLOPs = 2BDF, so the condition 2B / weight_bytes > flops_per_s / bytes_per_s gives
    ``B* = critical_intensity * weight_bytes / 2`` (240 tokens for bf16 on v5e).

    With ``d`` and ``f`` the activations' bytes (act_bytes each, default weight_bytes) are kept:
    B * (2DF/flops_per_s - act_bytes(D+F)/bytes_per_s) > weight_bytes DF / bytes_per_s.
    """
    i_crit = critical_intensity(flops_per_s, bytes_per_s)
    if d is None and f is None:
        return i_crit * weight_bytes / 2
    if d is None or f is None:
        raise ValueError("give both d and f for the exact critical batch, or neither for the B << D, F limit")
    act_bytes = weight_bytes if act_bytes is None else act_bytes
    gain_per_token_s = 2 * d * f / flops_per_s - act_bytes * (d + f) / bytes_per_s
    if gain_per_token_s <= 0:
        return math.inf  # every extra token costs more bytes than FLOPs: never compute-bound
    return weight_bytes * d * f / bytes_per_s / gain_per_token_s


def chip_matmul_critical_batch(chip: Chip, dtype: Dtype = "bf16", weight_bytes: float = 2) -> float:
    """``matmul_critical_batch`` for ``chip`` streaming weights of ``weight_bytes`` from HBM."""
    return matmul_critical_batch(chip.flops_per_s(dtype), chip.hbm_bytes_per_s, weight_bytes)


# ---------------------------------------------------------------- section 1's two-chip matmul

def two_chip_contracting_matmul(batch: int, d: int, f: int, flops_per_s: float,
                                link_bytes_per_s: float, dtype_bytes: float = 2) -> RooflineTime:
    """x[B, D] @ W[D, F] with D split over two chips; each chip sends its partial y[B, F].

    Each chip does half of the FLOPs (2 B (D/2) F) and sends B F partial sums to its peer over
    one link in one direction. Section 1: compute-bound once D / 2 > flops_per_s / link_bytes_per_s
    (for bf16), a condition on D rather than on the batch.
    """
    flops_per_chip = 2 * batch * (d / 2) * f
    bytes_sent = dtype_bytes * batch * f
    return roofline_time(flops_per_chip, bytes_sent, flops_per_s, link_bytes_per_s)


def two_chip_critical_d(flops_per_s: float, link_bytes_per_s: float, dtype_bytes: float = 2) -> float:
    """Contracting size D above which ``two_chip_contracting_matmul`` is compute-bound."""
    # B D F / flops_per_s > dtype_bytes B F / link  <=>  D > dtype_bytes * flops_per_s / link
    return dtype_bytes * critical_intensity(flops_per_s, link_bytes_per_s)


def array_bytes(shape: tuple[int, ...], dtype_bytes: float) -> float:
    """Bytes of a dense array of ``shape`` whose elements take ``dtype_bytes`` each."""
    if any(int(n) != n or n < 0 for n in shape):
        raise ValueError(f"shape must hold non-negative integers, got {shape!r}")
    return float(math.prod(shape) * dtype_bytes)
