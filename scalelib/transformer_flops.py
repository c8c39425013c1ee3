"""FLOPs of a decoder-only Transformer: forward, backward, rematerialization, and the ratios
section 4 derives from them.

Book: "How to Scale Your Model", section 4.1 (FLOPs of a contraction; a backward pass costs
twice the forward), 4.3 (per-layer FLOPs of the MLP, the Q/K/V/O projections and the attention
dot products), 4.4.1 (MoE) and 4.4.2 (rematerialization), Exercises 4.2, 4.4, 4.5 and 4.8.
FLOPs count a multiply-add as 2; letters as in ``scalelib.transformer``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

from scalelib.transformer import REMAT_POLICIES, RematPolicy, TransformerConfig, mlp_params_per_expert


@dataclass(frozen=True)
class FlopsBreakdown:
    """FLOPs by component for some number of tokens (forward, backward or a whole step)."""

    mlp_flops: float
    attn_proj_flops: float  # Q, K, V, O projections
    attn_qk_flops: float  # Q K^T dot products
    attn_av_flops: float  # softmax(.) V
    router_flops: float
    unembed_flops: float  # the embedding lookup is a gather: 0 FLOPs
    elementwise_flops: float = 0.0  # norms, softmax, activations (estimate; 0 unless asked for)

    @property
    def attn_dot_flops(self) -> float:
        return self.attn_qk_flops + self.attn_av_flops

    @property
    def matmul_flops(self) -> float:
        return (self.mlp_flops + self.attn_proj_flops + self.attn_dot_flops + self.router_flops
                + self.unembed_flops)

    @property
    def total_flops(self) -> float:
        return self.matmul_flops + self.elementwise_flops

    def scaled(self, factor: float) -> FlopsBreakdown:
        return FlopsBreakdown(*(factor * getattr(self, f.name) for f in fields(self)))

    def __add__(self, other: FlopsBreakdown) -> FlopsBreakdown:
        return FlopsBreakdown(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


MoeCompute = Literal["routed", "dense"]


def elementwise_flops_per_token(cfg: TransformerConfig, kv_len: int) -> float:
    """Rough forward count of the non-matmul FLOPs (as XLA counts them: 1 per add/mul/max).

    Per layer: each norm ~4D, softmax ~4 per score (N * kv_len scores), RoPE ~3 per q/k element,
    the gated activation ~4F and two residual adds 2D; plus the final norm and ~4V for the loss.
    Small against the matmuls once D and F are in the hundreds (documented, not exact).
    """
    layer = (cfg.norms_per_layer * 4 * cfg.d_model + 4 * cfg.n_heads * kv_len
             + 3 * (cfg.q_dim + cfg.kv_dim) + 4 * cfg.ff_width + 2 * cfg.d_model)
    return float(cfg.n_layers * layer + 4 * cfg.d_model + 4 * cfg.vocab_size)


def forward_flops(cfg: TransformerConfig, n_tokens: int, kv_len: int, *, causal_skip: bool = False,
                  moe_compute: MoeCompute = "routed", include_unembed: bool = True,
                  include_elementwise: bool = False) -> FlopsBreakdown:
    """Forward FLOPs for ``n_tokens`` query tokens that each attend to ``kv_len`` keys.

    Section 4.3: each [tokens, D] x [D, X] matmul costs 2 * tokens * D * X, Q K^T and the
    probabilities times V cost 2 * tokens * kv_len * N * H each. A masked (naive) causal
    attention still multiplies the whole T x S rectangle, which is what this counts;
    ``causal_skip=True`` counts only the unmasked half (what a flash kernel that skips masked
    blocks does, for self-attention). ``moe_compute='dense'`` counts every expert for every token, which
    is what ``scalelib.model``'s dense dispatch executes.
    """
    if moe_compute not in ("routed", "dense"):
        raise ValueError(f"moe_compute must be 'routed' or 'dense', got {moe_compute!r}")
    t, d, L = n_tokens, cfg.d_model, cfg.n_layers
    proj = 2 * t * d * (2 * cfg.q_dim + 2 * cfg.kv_dim)
    one_expert = 2 * t * mlp_params_per_expert(cfg)
    if cfg.is_moe:
        used = cfg.n_experts if moe_compute == "dense" else cfg.experts_per_token
        mlp = (used + cfg.n_shared_experts) * one_expert
        router = 2 * t * d * cfg.n_experts
    else:
        mlp, router = one_expert, 0
    # causal_skip: query i of a length-S sequence sees i + 1 keys, (S + 1) / 2 on average
    pairs = t * (kv_len + 1) / 2 if causal_skip else t * kv_len
    dot = 2 * pairs * cfg.n_heads * cfg.head_dim
    unembed = 2 * t * d * cfg.vocab_size if include_unembed else 0
    elem = t * elementwise_flops_per_token(cfg, kv_len) if include_elementwise else 0.0
    return FlopsBreakdown(mlp_flops=float(L * mlp), attn_proj_flops=float(L * proj), attn_qk_flops=float(L * dot),
                          attn_av_flops=float(L * dot), router_flops=float(L * router),
                          unembed_flops=float(unembed), elementwise_flops=float(elem))


def forward_flops_per_token(cfg: TransformerConfig, context_len: int, **kw: Any) -> FlopsBreakdown:
    """Forward FLOPs of one token attending to ``context_len`` keys (e.g. one decode step)."""
    return forward_flops(cfg, 1, context_len, **kw)


def recompute_flops(cfg: TransformerConfig, fwd: FlopsBreakdown, remat: RematPolicy) -> FlopsBreakdown:
    """Forward work redone in the backward pass under a rematerialization policy (section 4.4.2).

    'none' and 'dots' (every matmul output kept) redo no matmul; 'dots_no_batch' keeps only the
    weight matmuls (the book's "big matmuls only"), so Q K^T and the AV product are redone.
    'full' (one checkpoint per layer, the book's "block remat") reruns each layer except its
    last matmul (W_down): a checkpoint's own output is never needed by the backward, so JAX
    drops that product from the recomputation. 'block_inputs' (one checkpoint per residual
    block) likewise skips W_O and W_down. The unembedding sits outside the layers and is never
    redone, which is why the book's "8 per parameter-token" is an upper estimate. Elementwise
    work is redone by every policy except 'none'.
    """
    zero = fwd.scaled(0.0)
    if remat == "none":
        return zero
    if remat == "dots":
        return FlopsBreakdown(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, elementwise_flops=fwd.elementwise_flops)
    if remat == "dots_no_batch":
        return FlopsBreakdown(0.0, 0.0, fwd.attn_qk_flops, fwd.attn_av_flops, 0.0, 0.0, fwd.elementwise_flops)
    if remat in ("block_inputs", "full"):
        down_share = 1 / (3 if cfg.gated_mlp else 2)  # W_down's part of each expert's matmuls
        o_share = cfg.q_dim / (2 * cfg.q_dim + 2 * cfg.kv_dim)  # W_O's part of the projections
        proj = fwd.attn_proj_flops * (1 - o_share if remat == "block_inputs" else 1)
        return FlopsBreakdown(fwd.mlp_flops * (1 - down_share), proj, fwd.attn_qk_flops, fwd.attn_av_flops,
                              fwd.router_flops, 0.0, fwd.elementwise_flops)
    raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {remat!r}")


def train_flops(cfg: TransformerConfig, batch: int, seq_len: int, *, remat: RematPolicy = "none",
                moe_compute: MoeCompute = "routed", include_elementwise: bool = False) -> FlopsBreakdown:
    """Exact FLOPs of one training step on ``batch`` sequences of ``seq_len`` tokens.

    Section 4.1.1: a matmul's backward pass costs twice its forward (one product for the weight
    gradient, one for the input gradient), so every matmul counts 3x; rematerialization adds
    ``recompute_flops``. Elementwise backward work is estimated as 2x the forward.
    """
    fwd = forward_flops(cfg, batch * seq_len, seq_len, moe_compute=moe_compute,
                        include_elementwise=include_elementwise)
    return fwd.scaled(3.0) + recompute_flops(cfg, fwd, remat)


def train_flops_per_param_token(remat: RematPolicy = "none") -> int:
    """FLOPs per parameter per token of a training step: 2 forward + 4 backward (+2 when every
    layer's forward is recomputed, as under 'full' / 'block_inputs')."""
    if remat not in REMAT_POLICIES:
        raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {remat!r}")
    forward, backward = 2, 4
    return forward + backward + (forward if remat in ("block_inputs", "full") else 0)


def six_n_train_flops(n_params: float, n_tokens: float, remat: RematPolicy = "none") -> float:
    """The 6 * params * tokens rule (section 4.3), ignoring attention dot products."""
    return float(train_flops_per_param_token(remat)) * n_params * n_tokens


def attention_crossover_seq_len(cfg: TransformerConfig) -> float:
    """Length T above which attention dot products cost more than all weight matmuls of a layer.

    Solves 4 T^2 N H = 2 T (3 D F + 2 D (N + K) H) per token-layer (the 3x training factor
    cancels); with F = 4D, N = K and N H = D this is the book's T = 8D.
    """
    matmul_per_token = 2 * (mlp_params_per_expert(cfg) * (max(1, cfg.experts_per_token) + cfg.n_shared_experts)
                            + 2 * cfg.d_model * (cfg.q_dim + cfg.kv_dim))
    return matmul_per_token / (4 * cfg.n_heads * cfg.head_dim)


def attention_equals_projection_seq_len(cfg: TransformerConfig) -> float:
    """Length T at which attention dot-product FLOPs equal the Q/K/V/O projection FLOPs
    (Exercise 4.5): 4 T N H = 2 D (2NH + 2KH), i.e. T = 2D for MHA."""
    return 2 * cfg.d_model * (cfg.q_dim + cfg.kv_dim) / (2 * cfg.n_heads * cfg.head_dim)


def attention_intensity(q_len: int, kv_len: int, group_size: int) -> float:
    """FLOPs per byte of Q K^T plus AV alone (Exercise 4.4), with all arrays in one dtype.

    Per KV head and batch row: 4 T S G H FLOPs; bytes = 2 (bf16) x (Q and O: 2 T G H, K and V:
    2 S H). The dtype size cancels against the 2 in the FLOPs, leaving T S G / (T G + S).
    """
    return q_len * kv_len * group_size / (q_len * group_size + kv_len)


def attention_compute_bound_seq_len(critical_intensity: float, group_size: int) -> float:
    """Self-attention (T = S) length above which ``attention_intensity`` passes the critical
    intensity: T G / (G + 1) = I gives T = I (G + 1) / G."""
    return critical_intensity * (group_size + 1) / group_size


def moe_critical_batch_tokens(critical_intensity: float, n_experts: int, experts_per_token: int,
                              weight_bytes: float = 2) -> float:
    """Tokens per MoE layer needed for the expert matmuls to be compute-bound (Exercise 4.8).

    All E experts' weights (E D F weight_bytes) are loaded but each token uses k of them
    (2 k D F FLOPs), so B must exceed (critical_intensity * weight_bytes / 2) * E / k.
    """
    if not 1 <= experts_per_token <= n_experts:
        raise ValueError(f"need 1 <= experts_per_token <= n_experts, got k={experts_per_token}, E={n_experts}")
    return critical_intensity * weight_bytes / 2 * n_experts / experts_per_token


def sharded_contraction_flops(sizes: dict[str, int], sharding: dict[str, tuple[str, ...]],
                              mesh: dict[str, int]) -> tuple[float, float]:
    """(FLOPs per device, FLOPs over all devices) of a contraction over indices ``sizes``.

    ``sharding`` maps an index to the mesh axes it is split over (the same in every operand, so
    no communication is needed first). Each device multiplies its local blocks; mesh axes that
    split no index replicate the work (Exercise 4.2).
    """
    for idx, axes in sharding.items():
        if idx not in sizes:
            raise ValueError(f"sharding names index {idx!r}, which is not in sizes {sorted(sizes)}")
        for a in axes:
            if a not in mesh:
                raise ValueError(f"index {idx!r} is sharded over unknown mesh axis {a!r}; mesh axes: {sorted(mesh)}")
    local = {i: n / math.prod(mesh[a] for a in sharding.get(i, ())) for i, n in sizes.items()}
    per_device = 2 * math.prod(local.values())
    return per_device, per_device * math.prod(mesh.values())
