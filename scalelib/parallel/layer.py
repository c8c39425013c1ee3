"""The one layer of book section 5's cost model, and the pricing of its collectives under a layout.

Book section 5 reasons about a Transformer through one MLP layer: ``n_matrices`` weights of D x F
(the book drops the gate, so 2; ``LayerModel.from_config(cfg, count_gate=True)`` keeps it), 2 x
tokens x weights FLOPs forward and twice that backward. Each scheme prices that layer's
collectives through ``LayerTerms``: V_w (the layer's weight bytes) and V_a (the activation bytes
of a chip's tokens) moved over the layout's ICI axes, priced by ``scalelib.collectives`` (its
closed form, ``bandwidth_s``: on an axis with a wraparound W_ici is the BIDIRECTIONAL per-axis
rate and k axes carry k times that; ``wraparound=False`` falls back to one-way links and N - 1
hops). DCN is the per-host rate shared by the host's chips (``dcn_axis``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelib import collectives
from scalelib.collectives import Op
from scalelib.hardware import Chip
from scalelib.parallel.layout import Layout
from scalelib.topology import RingAxis, ring_axis
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int


@dataclass(frozen=True)
class LayerModel:
    """One layer as section 5 sees it: ``n_matrices`` weights of D x F (per expert for MoE)."""

    d_model: int
    d_ff: int
    n_matrices: int = 2
    n_experts: int = 0
    experts_per_token: int = 0
    n_layers: int = 1  # only pipelining needs it (one boundary send is shared by a stage's layers)

    def __post_init__(self) -> None:
        for name in ("d_model", "d_ff", "n_matrices", "n_layers"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        if self.n_experts and not 1 <= self.experts_per_token <= self.n_experts:
            raise ValueError(f"experts_per_token must be in [1, {self.n_experts}], got {self.experts_per_token}")

    @classmethod
    def from_config(cls, cfg: TransformerConfig, count_gate: bool = False) -> LayerModel:
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


def dcn_axis(chip: Chip, slices: int) -> RingAxis:
    """The slices as a ring over DCN: each chip gets its host's DCN rate divided among the host's
    chips, in total (no separate second direction), as the book's per-host figure is."""
    bw = chip.dcn_bytes_per_s_per_chip
    return RingAxis(slices, True, bw, bw, chip.ici_hop_latency_s)


@dataclass(frozen=True)
class LayerTerms:
    """What a scheme reads to price one layer's collectives on one chip (see module docstring)."""

    layout: Layout
    layer: LayerModel
    chip: Chip
    tokens_per_chip: float  # b: the tokens each chip's activations hold
    dtype_bytes: float = 2
    wraparound: bool = True

    @property
    def weight_bytes(self) -> float:
        """V_w: every weight of the layer (all experts)."""
        return self.layer.weight_params * self.dtype_bytes

    @property
    def activation_bytes(self) -> float:
        """V_a: the chip's tokens, D wide."""
        return self.tokens_per_chip * self.layer.d_model * self.dtype_bytes

    def axes(self, sizes: tuple[int, ...]) -> tuple[RingAxis, ...]:
        """ICI ring axes of these sizes on the layout's chip."""
        return tuple(ring_axis(self.chip, n, self.wraparound) for n in sizes)

    def time_s(self, op: Op, num_bytes: float, sizes: tuple[int, ...]) -> float:
        """The book's bandwidth time of ``op`` on ``num_bytes`` over ICI axes of ``sizes``."""
        return collectives.collective(op, num_bytes, self.axes(sizes)).bandwidth_s

    def dcn_time_s(self, op: Op, num_bytes: float) -> float:
        """The same over DCN, across the layout's slices."""
        return collectives.collective(op, num_bytes, (dcn_axis(self.chip, self.layout.slices),)).bandwidth_s


def fsdp_tp_comms_s(t: LayerTerms) -> tuple[float, float]:
    """FSDP x TP (section 5.1.4): weights, cut Y ways by TP, gathered and scattered over the data
    axes; activations, cut X ways by the batch, gathered and scattered over the model axes."""
    lay = t.layout
    gather_w = t.time_s("all_gather", t.weight_bytes / lay.model_ways, lay.data_axes)
    acts = t.time_s("all_gather", t.activation_bytes, lay.model_axes) + \
        t.time_s("reduce_scatter", t.activation_bytes, lay.model_axes)
    forward = gather_w + acts
    backward = gather_w + t.time_s("reduce_scatter", t.weight_bytes / lay.model_ways, lay.data_axes) + acts
    return forward, backward
