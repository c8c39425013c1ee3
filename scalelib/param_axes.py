"""The logical axes of every parameter of ``scalelib.model``: the table sharding rules read.

Book sections 4.2 (the letters of a Transformer layer) and 5 (each training scheme splits some of
those letters over mesh axes). A parameter's shape is a tuple of letters: W_Q is [L, D, N, H],
an expert's W_in [L, E, D, F]. Naming the letters once here lets a parallel scheme say how it
shards the model as data, "D over data, F over model", instead of as dimension indices per array
(``scalelib.parallel.specs`` turns such rules into PartitionSpecs).

Names: ``layers`` L, ``vocab`` V, ``d_model`` D, ``q_heads`` N, ``kv_heads`` K, ``head_dim`` H,
``d_ff`` F (an expert's width for MoE), ``experts`` E, ``expert_scores`` the router's E scores
(every device scores every expert, so it is named apart from the experts it chooses among),
``shared_ff`` the always-on experts' width.
"""

from __future__ import annotations

from typing import Any

import jax

from scalelib.transformer import TransformerConfig

Axes = tuple[str, ...]

# Every parameter name of model.init and its logical axes (dense MLP weights; MoE ones below).
PARAM_AXES: dict[str, Axes] = {
    "embed": ("vocab", "d_model"),
    "unembed": ("d_model", "vocab"),
    "final_norm": ("d_model",),
    "final_norm_bias": ("d_model",),
    "attn_norm": ("layers", "d_model"),
    "attn_norm_bias": ("layers", "d_model"),
    "wq": ("layers", "d_model", "q_heads", "head_dim"),
    "wk": ("layers", "d_model", "kv_heads", "head_dim"),
    "wv": ("layers", "d_model", "kv_heads", "head_dim"),
    "wo": ("layers", "q_heads", "head_dim", "d_model"),
    "bq": ("layers", "q_heads", "head_dim"),
    "bk": ("layers", "kv_heads", "head_dim"),
    "bv": ("layers", "kv_heads", "head_dim"),
    "bo": ("layers", "d_model"),
    "mlp_norm": ("layers", "d_model"),
    "mlp_norm_bias": ("layers", "d_model"),
    "w_gate": ("layers", "d_model", "d_ff"),
    "w_up": ("layers", "d_model", "d_ff"),
    "w_down": ("layers", "d_ff", "d_model"),
    "router": ("layers", "d_model", "expert_scores"),
    "router_bias": ("layers", "expert_scores"),
    "shared_w_gate": ("layers", "d_model", "shared_ff"),
    "shared_w_up": ("layers", "d_model", "shared_ff"),
    "shared_w_down": ("layers", "shared_ff", "d_model"),
}
# In an MoE layer the routed experts' weights carry the expert axis after L.
MOE_AXES: dict[str, Axes] = {
    "w_gate": ("layers", "experts", "d_model", "d_ff"),
    "w_up": ("layers", "experts", "d_model", "d_ff"),
    "w_down": ("layers", "experts", "d_ff", "d_model"),
}


def axes_of(name: str, moe: bool = False) -> Axes:
    """Logical axes of parameter ``name`` (a key of ``params`` or of ``params["layers"]``) in a dense
    model, or in an MoE one when ``moe``."""
    if moe and name in MOE_AXES:
        return MOE_AXES[name]
    if name not in PARAM_AXES:
        raise KeyError(f"parameter {name!r} has no entry in scalelib.param_axes.PARAM_AXES; add its logical axes "
                       "there when adding it to scalelib.model.init")
    return PARAM_AXES[name]


def is_moe(params: dict) -> bool:
    """Whether ``params`` (of ``scalelib.model.init``) hold MoE layers: they have a router."""
    return "router" in params.get("layers", {})


def param_axes(params: dict) -> dict:
    """A tree like ``params`` (arrays or ShapeDtypeStructs) holding each parameter's logical axes."""
    moe = is_moe(params)
    return {k: ({n: axes_of(n, moe) for n in v} if k == "layers" else axes_of(k, moe)) for k, v in params.items()}


def axis_sizes(cfg: TransformerConfig) -> dict[str, int]:
    """The size of each logical axis for ``cfg``."""
    return {"layers": cfg.n_layers, "vocab": cfg.vocab_size, "d_model": cfg.d_model, "q_heads": cfg.n_heads,
            "kv_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim, "d_ff": cfg.ff_width, "experts": cfg.n_experts,
            "expert_scores": cfg.n_experts,
            "shared_ff": cfg.n_shared_experts * cfg.ff_width}


def leaves_with_axes(params: dict) -> list[tuple[tuple[str, ...], Any, Axes]]:
    """(path, array, logical axes) of every parameter, in ``jax.tree.leaves`` order."""
    axes = param_axes(params)
    out = []
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        keys = tuple(str(k.key) for k in path)
        out.append((keys, leaf, axes[keys[0]][keys[1]] if keys[0] == "layers" else axes[keys[0]]))
    return out
