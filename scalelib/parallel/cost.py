"""Compute and communication time of one Transformer layer under each training scheme.

Book: "How to Scale Your Model", section 5 (How to Parallelize a Transformer for Training):
5.1.1 data parallelism, 5.1.2 FSDP / ZeRO-3, 5.1.3 tensor (Megatron) parallelism, 5.1.4 mixed FSDP
x tensor parallelism and its optimal split (with Appendix C), 5.1.5 pipelining, 5.1.6 data
parallelism between pods over DCN, and the summary table of section 5.2. Expert parallelism
(which the section leaves out) is priced the same way, with AllToAlls (section 3).

The layer is the section's simplification: an MLP of ``n_matrices`` weight matrices of D x F
(the book drops the gate, so 2; ``LayerModel.from_config(cfg, count_gate=True)`` keeps it).
Collectives are priced by ``scalelib.collectives`` (its closed form, ``bandwidth_s``), so the
bandwidth convention is the book's: on an axis with a wraparound W_ici is the BIDIRECTIONAL
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
from typing import Literal

from scalelib import collectives, roofline
from scalelib.hardware import Chip, Dtype
from scalelib.topology import RingAxis, ring_axis
from scalelib.transformer import TransformerConfig

Scheme = Literal["data", "fsdp", "tensor", "fsdp_tp", "pipeline", "expert", "multislice"]
SCHEMES: tuple[str, ...] = ("data", "fsdp", "tensor", "fsdp_tp", "pipeline", "expert", "multislice")


@dataclass(frozen=True)
class LayerModel:
    """One layer as section 5 sees it: ``n_matrices`` weights of D x F (per expert for MoE)."""

    d_model: int
    d_ff: int
    n_matrices: int = 2
    n_experts: int = 0
    experts_per_token: int = 0
    n_layers: int = 1  # only pipelining needs it (one boundary send is shared by a stage's layers)

    def __post_init__(self):
        for name in ("d_model", "d_ff", "n_matrices", "n_layers"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.n_experts and not 1 <= self.experts_per_token <= self.n_experts:
            raise ValueError(f"experts_per_token must be in [1, {self.n_experts}], got {self.experts_per_token}")

    @classmethod
    def from_config(cls, cfg: TransformerConfig, count_gate: bool = False) -> "LayerModel":
        """The book's view of ``cfg``: its MLP, without the gate matrix unless ``count_gate``."""
        m = 3 if (cfg.gated_mlp and count_gate) else 2
        return cls(cfg.d_model, cfg.ff_width, m, cfg.n_experts, cfg.experts_per_token, cfg.n_layers)

    @property
    def weight_params(self) -> int:
        """All weights of the layer (every expert for MoE)."""
        return self.n_matrices * self.d_model * self.d_ff * max(1, self.n_experts)

    @property
    def effective_d_ff(self) -> float:
        """The F the closed forms see: n_matrices / 2 x d_ff (the book's two-matrix MLP has F)."""
        return self.n_matrices * self.d_ff / 2

    def forward_flops(self, tokens: float) -> float:
        """2 x tokens x weights used per token (k experts for MoE)."""
        used = self.experts_per_token if self.n_experts else 1
        return 2.0 * tokens * self.n_matrices * self.d_model * self.d_ff * used


@dataclass(frozen=True)
class Layout:
    """How the chips are split: ICI axes for the batch (DP / FSDP) and for tensor parallelism,
    pipeline stages, expert axes and DCN slices. ``chips`` is the product of all of them."""

    scheme: Scheme
    data_axes: tuple[int, ...] = (1,)
    model_axes: tuple[int, ...] = (1,)
    expert_axes: tuple[int, ...] = (1,)
    stages: int = 1
    microbatches: int = 1
    slices: int = 1

    def __post_init__(self):
        if self.scheme not in SCHEMES:
            raise ValueError(f"scheme must be one of {SCHEMES}, got {self.scheme!r}")
        for name in ("data_axes", "model_axes", "expert_axes"):
            axes = tuple(getattr(self, name))
            if not axes or any(not isinstance(n, int) or n < 1 for n in axes):
                raise ValueError(f"{name} must be a non-empty tuple of positive ints, got {axes!r}")
            object.__setattr__(self, name, axes)
        for name in ("stages", "microbatches", "slices"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name} must be a positive int, got {v!r}")

    @property
    def data_ways(self) -> int:
        return math.prod(self.data_axes)

    @property
    def model_ways(self) -> int:
        return math.prod(self.model_axes)

    @property
    def expert_ways(self) -> int:
        return math.prod(self.expert_axes)

    @property
    def batch_ways(self) -> int:
        """Ways the global batch is split (data, expert and slice axes)."""
        return self.data_ways * self.expert_ways * self.slices

    @property
    def chips(self) -> int:
        return self.batch_ways * self.model_ways * self.stages


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


def _axes(chip: Chip, sizes: tuple[int, ...], wraparound: bool) -> tuple[RingAxis, ...]:
    return tuple(ring_axis(chip, n, wraparound) for n in sizes)


def _t(op: str, num_bytes: float, axes: tuple[RingAxis, ...]) -> float:
    return collectives.collective(op, num_bytes, axes).bandwidth_s


def layer_cost(layout: Layout, layer: LayerModel, chip: Chip, global_batch_tokens: float,
               dtype: Dtype = "bf16", dtype_bytes: float = 2, wraparound: bool = True) -> LayerCost:
    """Compute and comms of one layer, per chip, for ``global_batch_tokens`` under ``layout``.

    Forward FLOPs are 2 x tokens x weights, the backward twice that (section 4). Communication,
    per scheme (V_w = weight bytes, V_a = activation bytes of the chip's tokens, D wide):
    data: AllReduce V_w in the backward. fsdp: AllGather V_w forward; ReduceScatter + AllGather
    backward. tensor: AllGather + ReduceScatter of V_a in each pass. fsdp_tp: both, the weights
    cut by Y and the activations by X. pipeline: one hop of V_a per stage boundary (amortized
    over the stage's layers), plus a data-parallel AllReduce. expert: two AllToAlls of the
    routed tokens per pass, plus a data-parallel AllReduce of the shared weights. multislice:
    FSDP (x TP) inside each slice, and each chip's gradient shard all-reduced over DCN during
    the backward, alongside the ICI traffic (a different network).
    """
    if not (global_batch_tokens > 0 and math.isfinite(global_batch_tokens)):
        raise ValueError(f"global_batch_tokens must be a positive finite number, got {global_batch_tokens!r}")
    s = layout.scheme
    if s == "expert" and not layer.n_experts:
        raise ValueError("expert parallelism needs an MoE layer; build the LayerModel from a config with n_experts > 0")
    if s == "pipeline" and layout.stages > layer.n_layers:
        raise ValueError(f"{layout.stages} pipeline stages for {layer.n_layers} layers; use at most one stage "
                         "per layer (LayerModel.from_config sets n_layers)")
    flops_per_s = chip.flops_per_s(dtype)
    data, model = _axes(chip, layout.data_axes, wraparound), _axes(chip, layout.model_axes, wraparound)
    b = global_batch_tokens / layout.batch_ways  # tokens each chip's activations hold
    w_bytes = layer.weight_params * dtype_bytes / (layout.expert_ways if s == "expert" else 1)
    a_bytes = b * layer.d_model * dtype_bytes
    # per model layer and chip: TP splits a layer's FLOPs Y ways, a pipeline stage holds L / Z layers
    compute_f = roofline.compute_time_s(layer.forward_flops(b) / (layout.model_ways * layout.stages), flops_per_s)
    bubble = 0.0
    if s == "data":
        comms_f, comms_b = 0.0, _t("all_reduce", w_bytes, data)
    elif s == "fsdp":
        comms_f = _t("all_gather", w_bytes, data)
        comms_b = _t("reduce_scatter", w_bytes, data) + comms_f
    elif s == "tensor":
        comms_f = comms_b = _t("all_gather", a_bytes, model) + _t("reduce_scatter", a_bytes, model)
    elif s == "pipeline":
        # each stage sends its tokens' activations one hop per pass; amortized over all L layers
        hop = roofline.comms_time_s(a_bytes, chip.ici_one_way_bytes_per_s) if layout.stages > 1 else 0.0
        comms_f = hop / layer.n_layers
        comms_b = comms_f + _t("all_reduce", w_bytes / layout.stages, data)
        bubble = pipeline_bubble_fraction(layout.stages, layout.microbatches)
    elif s == "expert":
        routed = layout.expert_ways * b * max(1, layer.experts_per_token) * layer.d_model * dtype_bytes
        experts = _axes(chip, layout.expert_axes, wraparound)
        comms_f = 2 * _t("all_to_all", routed, experts)  # dispatch and combine
        comms_b = comms_f + _t("all_reduce", w_bytes, data)
    else:  # fsdp_tp, and multislice (FSDP x TP inside each slice, DP over DCN at the same time)
        gather_w = _t("all_gather", w_bytes / layout.model_ways, data)
        acts = _t("all_gather", a_bytes, model) + _t("reduce_scatter", a_bytes, model)
        comms_f = gather_w + acts
        comms_b = gather_w + _t("reduce_scatter", w_bytes / layout.model_ways, data) + acts
        if s == "multislice" and layout.slices > 1:
            shard = w_bytes / (layout.data_ways * layout.model_ways)
            comms_b = max(comms_b, _t("all_reduce", shard, (dcn_axis(chip, layout.slices),)))
    return LayerCost(layout, b, PassTime(compute_f, comms_f), PassTime(2 * compute_f, comms_b), bubble)


def dcn_axis(chip: Chip, slices: int) -> RingAxis:
    """The slices as a ring over DCN: each chip gets its host's DCN rate divided among the host's
    chips, in total (no separate second direction), as the book's per-host figure is."""
    bw = chip.dcn_bytes_per_s_per_chip
    return RingAxis(slices, True, bw, bw, chip.ici_hop_latency_s)


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
