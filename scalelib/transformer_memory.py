"""Memory of a Transformer: KV cache, saved activations, parameters / gradients / Adam state,
and the compute budget of a training run.

Book: "How to Scale Your Model", section 4.4.2 (gradient checkpointing and what each policy
keeps), 4.4.3 (KV caching), Exercise 4.7 (utilization of a training run) and section 5's
bytes-per-parameter bookkeeping for Adam. Sizes come from a ``TransformerConfig``.
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelib.dtypes import dtype_bytes as bytes_of
from scalelib.transformer import REMAT_POLICIES, RematPolicy, TransformerConfig
from scalelib.transformer_flops import six_n_train_flops
from scalelib.validate import non_negative


# ---------------------------------------------------------------- KV cache (section 4.4.3)

def kv_cache_bytes_per_token(cfg: TransformerConfig, dtype_bytes: str | float = 2) -> float:
    """Bytes one token adds to the KV cache: a key and a value of K * H per layer (2 L K H).

    GQA/MQA shrink it through ``n_kv_heads``; ``dtype_bytes`` is bytes per value (1 for an int8
    cache) or a format name ("bf16", "int8": ``scalelib.dtypes``).
    """
    return float(2 * cfg.n_layers * cfg.kv_dim * bytes_of(dtype_bytes))


def kv_bytes(bytes_per_token: float, seq_len: float, batch: float = 1) -> float:
    """Bytes of ``batch`` caches of ``seq_len`` tokens, given the per-token figure."""
    return (non_negative("bytes_per_token", bytes_per_token) * non_negative("seq_len", seq_len)
            * non_negative("batch", batch))


def kv_cache_bytes(cfg: TransformerConfig, seq_len: int, batch: int = 1, dtype_bytes: str | float = 2) -> float:
    """Bytes of the cache of ``batch`` sequences of ``seq_len`` tokens: an array [2, B, S, L, K, H]."""
    return kv_bytes(kv_cache_bytes_per_token(cfg, dtype_bytes), seq_len, batch)


# ---------------------------------------------------------------- activations (section 4.4.2)

# The book's rough count of D-sized arrays kept per layer and token (section 4.4.2): about 20
# without rematerialization, 1 with block remat, about 7 when only the big matmul outputs stay.
BOOK_SAVED_D_VECTORS_PER_LAYER = {"none": 20, "full": 1, "dots_no_batch": 7}
_ATTN_BLOCK_ARRAYS = ("attn_norm_in", "attn_norm_out", "q_rot", "k_rot", "v", "probs", "attn_out")


def saved_activation_elements(cfg: TransformerConfig, policy: RematPolicy, kv_len: int) -> dict[str, int]:
    """Per token and layer: the arrays kept from the forward for the backward, in elements.

    Follows ``scalelib.model``'s layer (pre-norm attention block, pre-norm MLP block):

    * 'none': everything the backward reads: both norm inputs and outputs, rotated q and k, v,
      the softmax probabilities (N x kv_len per token), the attention output before W_O, the
      MLP's gate and up outputs and the gated product fed to W_down.
    * 'dots': only matmul outputs (jax.checkpoint_policies.dots_saveable): q, k, v, the score
      matrix Q K^T and the AV product, W_O, gate, up and down outputs. Norms, RoPE, softmax and
      the activation are recomputed.
    * 'dots_no_batch': matmuls with no batch dimension only (dots_with_no_batch_dims_saveable):
      the 7 weight-matmul outputs of the book's "big matmuls only" (q, k, v, o + 3 MLP matrices
      for a gated MLP); attention's score and AV products are recomputed.
    * 'full': each layer is one checkpoint (MaxText's 'full', the book's "block remat"): only
      the layer's input is kept (one D vector) and the whole layer reruns in the backward.
    * 'block_inputs': each residual block (attention, MLP) is its own checkpoint, so the inputs
      of both are kept (two D vectors); the same recompute as 'full', but only one block's
      arrays are live at a time during the backward.

    MoE layers keep the router logits and every executed expert's arrays; not modelled here.
    """
    d, f, q, kv = cfg.d_model, cfg.ff_width, cfg.q_dim, cfg.kv_dim
    scores = cfg.n_heads * kv_len
    if policy == "none":
        out = {"attn_norm_in": d, "attn_norm_out": d, "q_rot": q, "k_rot": kv, "v": kv, "probs": scores,
               "attn_out": q, "mlp_norm_in": d, "mlp_norm_out": d, "up": f, "mlp_hidden": f}
        if cfg.gated_mlp:
            out["gate"] = f
        return out
    if policy in ("dots", "dots_no_batch"):
        out = {"q": q, "k": kv, "v": kv, "o": d, "up": f, "down": d}
        if cfg.gated_mlp:
            out["gate"] = f
        if policy == "dots":
            out.update(scores=scores, attn_out=q)
        return out
    if policy == "block_inputs":
        return {"attn_block_in": d, "mlp_block_in": d}
    if policy == "full":
        return {"layer_in": d}
    raise ValueError(f"policy must be one of {REMAT_POLICIES}, got {policy!r}")


@dataclass(frozen=True)
class ActivationMemory:
    """Bytes of activations a training step keeps for its backward pass."""

    policy: str
    saved_bytes_per_layer: float  # kept from the forward, for one layer and all tokens
    saved_bytes: float  # all layers
    live_layer_bytes: float  # rematerialized arrays alive at once in the backward (upper bound; 0 for 'none')

    @property
    def peak_bytes(self) -> float:
        """Saved activations plus the one layer being rematerialized."""
        return self.saved_bytes + self.live_layer_bytes


def activation_memory(cfg: TransformerConfig, batch: float, seq_len: int, policy: RematPolicy = "none",
                      dtype_bytes: float = 2) -> ActivationMemory:
    """Activation bytes of one training step of ``batch`` x ``seq_len`` tokens under ``policy``."""
    tokens = batch * seq_len
    per_layer = tokens * dtype_bytes * sum(saved_activation_elements(cfg, policy, seq_len).values())
    everything = saved_activation_elements(cfg, "none", seq_len)
    attn = sum(v for k, v in everything.items() if k in _ATTN_BLOCK_ARRAYS)
    if policy == "none":
        live = 0
    elif policy == "block_inputs":  # one residual block at a time
        live = max(attn, sum(everything.values()) - attn)
    else:
        live = sum(everything.values())
    return ActivationMemory(policy=policy, saved_bytes_per_layer=per_layer, saved_bytes=cfg.n_layers * per_layer,
                            live_layer_bytes=float(tokens * dtype_bytes * live))


def book_activation_bytes(n_tokens: float, cfg: TransformerConfig, policy: RematPolicy,
                          dtype_bytes: float = 2) -> float:
    """The book's back-of-envelope figure: dtype_bytes x (D vectors per layer) x tokens x D x L."""
    if policy not in BOOK_SAVED_D_VECTORS_PER_LAYER:
        raise ValueError(f"the book gives a rough count only for {sorted(BOOK_SAVED_D_VECTORS_PER_LAYER)}, "
                         f"got {policy!r}; use activation_memory for the exact per-array count")
    return dtype_bytes * BOOK_SAVED_D_VECTORS_PER_LAYER[policy] * n_tokens * cfg.d_model * cfg.n_layers


# ---------------------------------------------------------------- training state (section 5)

@dataclass(frozen=True)
class TrainingStateMemory:
    """Bytes of the weights, gradients and Adam moments of a model."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        return self.params_bytes + self.grads_bytes + self.optimizer_bytes


def training_state_memory(n_params: float, param_bytes: float = 2, grad_bytes: float | None = None,
                          adam_moment_bytes: float = 4, master_copy_bytes: float = 0) -> TrainingStateMemory:
    """Adam keeps two moments per parameter (``adam_moment_bytes`` each); ``master_copy_bytes`` = 4
    adds an fp32 copy of bf16 weights. Gradients default to the parameters' dtype."""
    grad_bytes = param_bytes if grad_bytes is None else grad_bytes
    for name, v in (("n_params", n_params), ("param_bytes", param_bytes), ("grad_bytes", grad_bytes),
                    ("adam_moment_bytes", adam_moment_bytes), ("master_copy_bytes", master_copy_bytes)):
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v!r}")
    return TrainingStateMemory(params_bytes=n_params * param_bytes, grads_bytes=n_params * grad_bytes,
                               optimizer_bytes=n_params * (2 * adam_moment_bytes + master_copy_bytes))


# ---------------------------------------------------------------- compute budget (Exercise 4.7)

STRUCTURED_SPARSITY_SPEEDUP = 2.0  # datasheet "with sparsity" figures assume 2:4 sparsity


def dense_flops_per_s(quoted_flops_per_s: float, quoted_with_sparsity: bool = True) -> float:
    """Dense peak from a datasheet figure: sparse figures are twice what dense matmuls reach."""
    return quoted_flops_per_s / STRUCTURED_SPARSITY_SPEEDUP if quoted_with_sparsity else quoted_flops_per_s


def available_flops(chip_hours: float, flops_per_s: float) -> float:
    """FLOPs that ``chip_hours`` of chips at peak ``flops_per_s`` could do."""
    return chip_hours * 3600.0 * flops_per_s


def training_mfu(active_params: float, n_tokens: float, chip_hours: float, flops_per_s: float) -> float:
    """Model FLOPs utilization of a finished run: 6 N T over what the chips could have done."""
    return six_n_train_flops(active_params, n_tokens) / available_flops(chip_hours, flops_per_s)
