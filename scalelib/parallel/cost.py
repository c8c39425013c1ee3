"""Compute and communication time of one Transformer layer under each training scheme.

Book: "How to Scale Your Model", section 5 (How to Parallelize a Transformer for Training):
5.1.1 data parallelism, 5.1.2 FSDP / ZeRO-3, 5.1.3 tensor (Megatron) parallelism, 5.1.4 mixed FSDP
x tensor parallelism and its optimal split (with Appendix C), 5.1.5 pipelining, 5.1.6 data
parallelism between pods over DCN, and the summary table of section 5.2. Expert parallelism
(which the section leaves out) is priced the same way, with AllToAlls (section 3).

The layer is the section's simplification (``layer.LayerModel``): an MLP of ``n_matrices``
weight matrices of D x F. Each scheme prices its own collectives (``Scheme.layer_comms_s``, found
through the registry by the layout's scheme name) with ``scalelib.collectives``' closed form, so
the bandwidth convention is the book's: on an axis with a wraparound W_ici is the BIDIRECTIONAL
per-axis rate (1.8e11 bytes/s on v5p) and k axes carry k times that; ``wraparound=False``
falls back to one-way links and N - 1 hops. Point-to-point pipeline sends use the one-way rate
of one link. DCN is the per-host rate shared by the host's chips.

Each pass (forward, backward) overlaps its own communication with its own FLOPs; the step
costs the sum over passes of max(compute, comms), and a layout is compute-bound when every
pass is. That is the book's criterion (it compares the pass with the most comms per FLOP).
``scalelib.parallel.flops`` counts what the executed steps compute, for comparison with XLA.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scalelib import roofline
from scalelib.hardware import Chip, Dtype
from scalelib.parallel import registry
from scalelib.parallel.layer import LayerModel, LayerTerms
from scalelib.parallel.layout import Layout


@dataclass(frozen=True)
class PassTime(roofline.RooflineTime):
    """One pass (forward or backward) of one layer on one chip: a roofline time under the names
    the training cost model reads (``time_s`` is the overlapped time)."""

    @property
    def time_s(self) -> float:
        return self.lower_bound_s

    @property
    def compute_bound(self) -> bool:
        return self.bound == "compute"


@dataclass(frozen=True)
class LayerCost:
    """Per-layer, per-chip cost of a training step under one layout."""

    layout: Layout
    batch_per_chip_tokens: float
    forward: PassTime
    backward: PassTime
    bubble_fraction: float = 0.0  # pipeline: share of the step a stage sits idle

    @property
    def compute_s(self) -> float:
        return self.forward.compute_s + self.backward.compute_s

    @property
    def comms_s(self) -> float:
        return self.forward.comms_s + self.backward.comms_s

    @property
    def step_s(self) -> float:
        """Each pass overlapped with its own comms, stretched by the pipeline bubble."""
        return (self.forward.time_s + self.backward.time_s) / (1.0 - self.bubble_fraction)

    @property
    def compute_bound(self) -> bool:
        return self.forward.compute_bound and self.backward.compute_bound

    @property
    def comms_to_compute(self) -> float:
        """Comms over compute in the tighter pass: compute-bound exactly when <= 1."""
        return max(p.comms_s / p.compute_s for p in (self.forward, self.backward))


def layer_cost(layout: Layout, layer: LayerModel, chip: Chip, global_batch_tokens: float,
               dtype: Dtype = "bf16", dtype_bytes: float = 2, wraparound: bool = True) -> LayerCost:
    """Compute and comms of one layer, per chip, for ``global_batch_tokens`` under ``layout``.

    Forward FLOPs are 2 x tokens x weights, the backward twice that (section 4), cut by the model
    axes and the stages (TP splits a layer's FLOPs Y ways, a pipeline stage holds L / Z layers).
    Communication is the layout's scheme's (``Scheme.layer_comms_s``); with V_w the weight bytes and
    V_a the activation bytes of the chip's tokens: data: AllReduce V_w in the backward. fsdp:
    AllGather V_w forward; ReduceScatter + AllGather backward. tensor: AllGather + ReduceScatter of
    V_a in each pass. fsdp_tp: both, the weights cut by Y and the activations by X. pipeline: one
    hop of V_a per stage boundary (amortized over the stage's layers), plus a data-parallel
    AllReduce. expert: two AllToAlls of the routed tokens per pass, plus a data-parallel AllReduce
    of the shared weights. multislice: FSDP (x TP) inside each slice, and each chip's gradient shard
    all-reduced over DCN during the backward, alongside the ICI traffic (a different network).
    """
    if not (global_batch_tokens > 0 and math.isfinite(global_batch_tokens)):
        raise ValueError(f"global_batch_tokens must be a positive finite number, got {global_batch_tokens!r}")
    scheme = registry.get(layout.scheme)
    scheme.check_layer(layout, layer)
    b = global_batch_tokens / layout.batch_ways  # tokens each chip's activations hold
    compute_f = roofline.compute_time_s(layer.forward_flops(b) / (layout.model_ways * layout.stages),
                                        chip.flops_per_s(dtype))
    comms_f, comms_b = scheme.layer_comms_s(LayerTerms(layout, layer, chip, b, dtype_bytes, wraparound))
    return LayerCost(layout, b, PassTime(compute_f, comms_f), PassTime(2 * compute_f, comms_b),
                     scheme.bubble_fraction(layout))


# ------------------------------------------------------------------ closed-form thresholds

def ici_intensity(chip: Chip, n_axes: int = 1, dtype: Dtype = "bf16") -> float:
    """alpha = C / (n_axes x W_ici bidi): FLOPs per byte the ICI can feed (2550 per axis on v5p)."""
    if not (isinstance(n_axes, int) and n_axes >= 1):
        raise ValueError(f"n_axes must be a positive int, got {n_axes!r}")
    return roofline.critical_intensity(chip.flops_per_s(dtype), n_axes * chip.ici_bidi_bytes_per_s)


def critical_batch_tokens(flops_per_s: float, bytes_per_s: float) -> float:
    """Tokens per replica above which data parallelism's weight sync hides under the FLOPs.

    Per layer the backward does 8 B D F FLOPs against an AllReduce of 8 D F bytes (bf16), so
    the threshold is the channel's critical intensity C / W (section 5.1.1; 5.1.6 for DCN).
    """
    return roofline.critical_intensity(flops_per_s, bytes_per_s)


def dp_critical_batch_per_chip_tokens(chip: Chip, n_axes: int = 1, dtype: Dtype = "bf16") -> float:
    """DP and FSDP stay compute-bound while batch per chip > C / (n_axes W_ici) (5.1.1, 5.1.2)."""
    return ici_intensity(chip, n_axes, dtype)


def tp_max_ways(d_ff: float, chip: Chip, n_axes: int = 1) -> float:
    """Tensor parallelism is compute-bound while Y < n_axes x F / alpha (section 5.1.3)."""
    return d_ff / ici_intensity(chip, n_axes)


def tp_min_d_ff(ways: float, chip: Chip, n_axes: int = 1) -> float:
    """Smallest F for which ``ways``-way tensor parallelism stays compute-bound: Y x alpha / n_axes."""
    return ways * ici_intensity(chip, n_axes)


def mixed_critical_batch_per_chip_tokens(d_ff: float, chip: Chip, m_x: int = 2, m_y: int = 1) -> float:
    """FSDP x TP at the optimal split is compute-bound while B / N > 4 alpha^2 / (M_X M_Y F)
    (section 5.1.4 and Appendix C); alpha is the single-axis C / W_ici."""
    alpha = ici_intensity(chip)
    return 4 * alpha**2 / (m_x * m_y * d_ff)


def optimal_fsdp_ways(batch_tokens: float, d_ff: float, chips: float, m_x: int = 2, m_y: int = 1) -> float:
    """X_opt = sqrt(B M_X N / (F M_Y)), the FSDP degree minimizing FSDP + TP comms (5.1.4)."""
    for name, v in (("batch_tokens", batch_tokens), ("d_ff", d_ff), ("chips", chips)):
        if not v > 0:
            raise ValueError(f"{name} must be > 0, got {v!r}")
    return math.sqrt(batch_tokens * m_x * chips / (d_ff * m_y))


def mixed_fsdp_ways_range(batch_tokens: float, d_ff: float, chips: float, chip: Chip, m_x: int = 2,
                          m_y: int = 1) -> tuple[float, float] | None:
    """FSDP degrees X (with Y = N / X) at which FSDP x TP is compute-bound: the roots of
    X^2 F / (N M_X) - X B F / (N alpha) + B / M_Y = 0 (Appendix C). None below the threshold.
    Chapter 6 trains LLaMA 3-70B with the larger root (the most FSDP that still keeps up)."""
    alpha = ici_intensity(chip)
    a, b, c = d_ff / (chips * m_x), -batch_tokens * d_ff / (chips * alpha), batch_tokens / m_y
    disc = b * b - 4 * a * c
    if disc < 0:
        return None
    root = math.sqrt(disc)
    return (-b - root) / (2 * a), (-b + root) / (2 * a)


def power_of_two_split(chips: int, fsdp_target: float) -> tuple[int, int]:
    """(X, Y): X the power of two nearest ``fsdp_target`` (in log scale), Y the largest power
    of two with X Y <= chips (chapter 6 turns X ~ 1927 on 8960 chips into 2048 x 4)."""
    if not (fsdp_target >= 1 and chips >= 1):
        raise ValueError(f"need fsdp_target >= 1 and chips >= 1, got {fsdp_target!r}, {chips!r}")
    x = min(2 ** round(math.log2(fsdp_target)), 2 ** int(math.log2(chips)))
    return x, 2 ** int(math.log2(chips // x))


def pipeline_bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of a GPipe-style schedule: (Z - 1) / (M + Z - 1) for Z stages, M microbatches."""
    if not (isinstance(stages, int) and stages >= 1 and isinstance(microbatches, int) and microbatches >= 1):
        raise ValueError(f"stages and microbatches must be positive ints, got {stages!r}, {microbatches!r}")
    return (stages - 1) / (microbatches + stages - 1)


def hbm_critical_batch_tokens(chip: Chip, dtype: Dtype = "bf16") -> float:
    """Batch per chip below which the matmuls wait on HBM (section 5.2's closing remark)."""
    return roofline.chip_matmul_critical_batch(chip, dtype)


@dataclass(frozen=True)
class DcnBudget:
    """A slice's FLOPs and DCN bandwidth, and the per-slice batch that keeps DCN DP compute-bound."""

    chips: int
    hosts: int
    flops_per_s: float
    dcn_bytes_per_s: float

    @property
    def critical_batch_tokens(self) -> float:
        return critical_batch_tokens(self.flops_per_s, self.dcn_bytes_per_s)


def dcn_budget(chip: Chip, chips: int, dtype: Dtype = "bf16") -> DcnBudget:
    """Section 5.1.6: hosts = chips / chips per host, each with ``dcn_bytes_per_s_per_host``."""
    if not (isinstance(chips, int) and chips >= 1):
        raise ValueError(f"chips must be a positive int, got {chips!r}")
    hosts = math.ceil(chips / chip.chips_per_host)
    return DcnBudget(chips, hosts, chips * chip.flops_per_s(dtype), hosts * chip.dcn_bytes_per_s_per_host)
