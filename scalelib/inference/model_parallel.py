"""The generate step sharded over chips: model (tensor) parallelism and its ICI cost.

Book: section 7.3.2 (generation keeps the weights and caches still and moves activations: FSDP
would ship weights over ICI, data parallelism copies them, and a single token has no sequence to
split, so model parallelism is what is left), 7.3.3 (the cache sharded over KV heads, then over
batch with two AllToAlls per layer), Appendices B and C (2D weight-stationary sharding;
collectives on small activations pay hop latency), Exercise 7.7 and section 8.1.1.

Y-way model parallelism of x[B, D] @ W[D, F]: each chip holds and streams D F / Y weights from
its HBM, does 2 B D F / Y FLOPs, and the [B, D] activations cross the ICI (AllGather in,
ReduceScatter out; an AllReduce when they stay replicated). ICI times are
``scalelib.collectives``' closed forms on rings of the chip (both directions of each link).
While weights are what the step waits on, sharding further cuts latency at little cost in
throughput, until the ICI time passes the HBM time: Y > F / (B beta), beta = W_hbm / W_ici.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from scalelib import collectives as cc
from scalelib import roofline as rl
from scalelib.hardware import Chip, Dtype
from scalelib.validate import positive, positive_int
from scalelib.topology import RingAxis, ring_axis


def hbm_over_ici(chip: Chip) -> float:
    """beta = HBM bandwidth / bidirectional ICI bandwidth of one link (9 on v5e)."""
    return chip.hbm_bytes_per_s / chip.ici_bidi_bytes_per_s


def max_generate_model_ways(d_ff: float, batch: float, beta: float) -> float:
    """Most model-parallel ways before ICI time passes weight-loading time: Y = F / (B beta)."""
    return positive("d_ff", d_ff) / (positive("batch", batch) * positive("beta", beta))


def weight_bytes_per_chip(weight_bytes: float, ways: int) -> float:
    """Each of ``ways`` chips holds an equal share of the weights."""
    return weight_bytes / positive_int("ways", ways)


@dataclass(frozen=True)
class GenerateMatmulTime:
    """One model-sharded [B, D] x [D, F] matmul of a generate step, per chip."""

    ici_s: float  # the [B, D] activations gathered over the model axis
    hbm_s: float  # this chip's D F / Y weights streamed from HBM
    math_s: float  # 2 B D F / Y FLOPs

    @property
    def time_s(self) -> float:
        """All three overlap: the slowest sets the time."""
        return max(self.ici_s, self.hbm_s, self.math_s)

    @property
    def bound(self) -> str:
        """'ici', 'hbm' or 'math': whichever takes longest."""
        return max((self.ici_s, "ici"), (self.hbm_s, "hbm"), (self.math_s, "math"))[1]


def generate_matmul_time(batch: int, d_model: int, d_ff: int, ways: int, chip: Chip, *, weight_bytes: float = 2,
                         act_bytes: float = 2, compute: Dtype = "bf16") -> GenerateMatmulTime:
    """T_ici, T_hbm and T_math of one MLP matmul sharded ``ways`` ways over F (section 8.1.1)."""
    ways = positive_int("ways", ways)
    gather = cc.all_gather(rl.array_bytes((batch, d_model), act_bytes), ring_axis(chip, ways))
    ici_s = gather.bandwidth_s if ways > 1 else 0.0
    weights = rl.array_bytes((d_model, d_ff), weight_bytes) / ways
    return GenerateMatmulTime(ici_s=ici_s, hbm_s=rl.comms_time_s(weights, chip.hbm_bytes_per_s),
                              math_s=rl.compute_time_s(2 * batch * d_model * d_ff / ways, chip.flops_per_s(compute)))


def megatron_layer_comms_s(batch: int, d_model: int, axes: RingAxis | Sequence[RingAxis],
                           act_bytes: float = 2) -> float:
    """ICI seconds per layer with activations kept replicated: an AllReduce of [B, D] after the
    attention block and another after the MLP, each at least its hops' latency."""
    reduce = cc.all_reduce(rl.array_bytes((batch, d_model), act_bytes), axes)
    return 2 * reduce.total_s


def kv_batch_sharding_all_to_alls_s(batch: int, n_heads: int, head_dim: int, axes: RingAxis | Sequence[RingAxis],
                                    act_bytes: float = 2) -> float:
    """Extra ICI seconds per layer when the cache is split over batch (section 7.3.3): one AllToAll
    moves Q [B, N, H] from head to batch sharding, one moves the attention output back."""
    return 2 * cc.all_to_all(rl.array_bytes((batch, n_heads, head_dim), act_bytes), axes).total_s


# ------------------------------------------------------------------ latency-bound collectives (Appendix C)

def latency_bound_buffer_bytes(axis: RingAxis) -> float:
    """Array size below which a gather over ``axis`` waits on hop latency, not bandwidth: each of
    the axis' shards is smaller than one hop's worth of one-way bandwidth (360 kB for 8 v5e)."""
    return axis.size * cc.latency_bound_bytes(axis)


def min_latency_bound_ways(batch: int, d_model: int, chip: Chip, act_bytes: float = 1) -> float:
    """Model-parallel ways beyond which the [B, D] activations' collectives are latency-bound:
    Y > B D act_bytes / (W_one_way x T_hop)."""
    return rl.array_bytes((batch, d_model), act_bytes) / cc.latency_bound_bytes(ring_axis(chip, 2))


# ------------------------------------------------------------------ 1D vs 2D weight-stationary (Appendix B, Ex 7.7)
# Times below are in units of B D / (W sqrt(n)) (2D) or B D / W (1D) for bf16 activations, with
# W the bidirectional ICI bandwidth of one axis.

def one_d_ws_comms_s(batch: int, d_model: int, axes: Sequence[RingAxis], act_bytes: float = 2) -> float:
    """1D weight-stationary MLP (weights split over F on every axis): AllGather of [B, D] in,
    ReduceScatter of [B, D] out, both over all ``axes``."""
    x = rl.array_bytes((batch, d_model), act_bytes)
    return cc.all_gather(x, axes).bandwidth_s + cc.reduce_scatter(x, axes).bandwidth_s


def two_d_ws_comms_s(batch: int, d_model: int, d_ff: int, x_axis: RingAxis, yz_axes: Sequence[RingAxis],
                     act_bytes: float = 2) -> float:
    """2D weight-stationary MLP, W_in[D_X, F_YZ]: AllGather_YZ of [B, D_X], AllReduce_X of the
    [B, F_YZ] partial sums, ReduceScatter_YZ of [B, D_X] (Exercise 7.7's algorithm)."""
    yz = math.prod(a.size for a in yz_axes)
    x_in = rl.array_bytes((batch, d_model), act_bytes) / x_axis.size
    hidden = rl.array_bytes((batch, d_ff), act_bytes) / yz
    return (cc.all_gather(x_in, yz_axes).bandwidth_s + cc.all_reduce(hidden, x_axis).bandwidth_s
            + cc.reduce_scatter(x_in, yz_axes).bandwidth_s)


def one_d_ws_comms_coefficient(n_axes: int = 3) -> float:
    """T_1D in units of B D / W: 2 x 2 B D bytes shared by ``n_axes`` axes (4/3 on a 3D torus)."""
    return 4 / positive_int("n_axes", n_axes)


def two_d_ws_optimal_x(chips: float, f_over_d: float) -> float:
    """X (ways over D) minimizing ``two_d_ws_comms_s`` with Y Z on two axes: sqrt(n D / (2 F))."""
    return math.sqrt(positive("chips", chips) / (2 * positive("f_over_d", f_over_d)))


def two_d_ws_comms_coefficient(f_over_d: float) -> float:
    """T_2D at the best X, in units of B D / (W sqrt(n)).

    With bf16 activations, T = B / W x (2 D / X + 4 F X / n); at X = sqrt(n D / (2F)) the two
    terms are equal, giving 4 sqrt(2 F / D) (11.3 for F = 4D).
    """
    return 4 * math.sqrt(2 * positive("f_over_d", f_over_d))


def two_d_ws_crossover_chips(f_over_d: float, n_axes_1d: int = 3) -> float:
    """Chips beyond which 2D weight-stationary needs less ICI time than 1D over ``n_axes_1d`` axes:
    T_2D falls as 1 / sqrt(n) while T_1D stays flat, so n* = (c_2D / c_1D)^2 (72 for F = 4D)."""
    return (two_d_ws_comms_coefficient(f_over_d) / one_d_ws_comms_coefficient(n_axes_1d)) ** 2
