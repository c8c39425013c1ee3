"""Layer-level pieces that several schemes share: weights gathered just in time, and Megatron's f and g.

* ``gathered_loss`` (FSDP, book section 5.1.2): the model's loss with every weight shard
  AllGathered over the data axis just before its layer uses it. Each gathered weight is named
  ``GATHERED`` so that a ``jax.checkpoint`` with the ``REGATHER`` policy drops it after the forward
  and the backward gathers it again; the transpose of a tiled ``all_gather`` is the ReduceScatter of
  the weight's gradient.
* ``tensor_hooks`` (tensor parallelism, section 5.1.3): the layer hooks that make ``scalelib.model``'s
  blocks run on head / F shards. ``enter`` casts the block's normalized input to varying (its
  transpose is the backward's AllReduce of dIn) and ``exit`` AllReduces the block's partial sums;
  ``tensor_collectives``, ``check_heads_and_width`` and ``sharded_step_flops`` go with them.
"""

from __future__ import annotations

from typing import Any

import jax
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from scalelib import compat, model
from scalelib import transformer_flops as fl
from scalelib.parallel.flops import StepFlops, adam_flops
from scalelib.parallel.scheme import Collective
from scalelib.parallel.specs import dim_of
from scalelib.transformer import TransformerConfig

GATHERED = "fsdp_weights"  # checkpoint name of gathered weights: never saved, regathered in the backward
REGATHER = jax.checkpoint_policies.save_anything_except_these_names(GATHERED)


def gathered_loss(shards: dict, tokens: jax.Array, cfg: TransformerConfig, specs: dict, axis: str,
                  hooks: model.LayerHooks = model.SINGLE_DEVICE) -> jax.Array:
    """Mean loss over tokens [b, T+1] with each weight split over ``axis`` (as ``specs`` say) gathered
    just before use; layer weights are gathered one layer at a time."""
    def gather(w: jax.Array, spec: Any, layered: bool) -> jax.Array:  # shard -> full weight
        d = dim_of(spec, axis)
        if d is None:
            return w
        return checkpoint_name(lax.all_gather(w, axis, axis=d - layered, tiled=True), GATHERED)

    top = {k: gather(v, specs[k], False) for k, v in shards.items() if k != "layers"}

    def layer_at(i: int) -> dict:
        return {k: gather(v[i], specs["layers"][k], True) for k, v in shards["layers"].items()}

    return model.stack_loss(cfg, top, layer_at, tokens, hooks)


def gathered_collectives(top_key: str, local_bytes: int, split: bool, n_layers: int, x: int,
                         axis: str) -> list[Collective]:
    """The collectives ``gathered_loss`` runs for one weight of ``local_bytes`` (its part outside ``axis``):
    per use (each layer, or once) an AllGather forward, another backward (but for the embedding,
    whose gradient is a scatter-add that never reads it) and a ReduceScatter of its gradient; a
    weight ``axis`` does not split has its gradient AllReduced instead."""
    ax = (axis,)
    if not split:
        return [Collective("all_reduce", ax, local_bytes)]
    uses = n_layers if top_key == "layers" else 1
    out = [Collective("all_gather", ax, local_bytes // uses, uses, "forward")]
    if top_key != "embed":
        out.append(Collective("all_gather", ax, local_bytes // uses, uses, "backward"))
    return out + [Collective("reduce_scatter", ax, local_bytes // uses // x, uses)]


def tensor_hooks(axis: str) -> model.LayerHooks:
    """Hooks for weights split over ``axis`` by heads and F: one AllReduce forward and one backward per block."""
    return model.LayerHooks(enter=lambda y: compat.pvary(y, axis), exit=lambda out: lax.psum(out, axis))


def tensor_collectives(cfg: TransformerConfig, axis: str, local_batch: int, seq_len: int) -> list[Collective]:
    """The AllReduces ``tensor_hooks`` runs: one [b, T, D] float32 activation per block (attention, MLP) and
    pass, i.e. 2 L forward and 2 L backward over ``axis``, on ``local_batch`` sequences."""
    act = local_batch * seq_len * cfg.d_model * 4  # [b, T, D] float32
    return [Collective("all_reduce", (axis,), act, 2 * cfg.n_layers, "forward"),
            Collective("all_reduce", (axis,), act, 2 * cfg.n_layers, "backward")]


def check_heads_and_width(cfg: TransformerConfig, y: int) -> None:
    """Raise unless heads, KV heads and F split evenly over a model axis of ``y`` devices."""
    if cfg.is_moe:
        raise ValueError("tensor parallelism here covers dense MLPs; MoE layers belong to scalelib.parallel.expert")
    for name, value in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("d_ff", cfg.ff_width)):
        if value % y:
            raise ValueError(f"{name}={value} is not divisible by the model axis size {y}; pick a model axis that "
                             f"divides it (KV heads would otherwise have to be replicated, which is not done here)")


def sharded_step_flops(cfg: TransformerConfig, local_batch: int, seq_len: int, y: int, held: int) -> StepFlops:
    """Per device with attention heads and F split ``y`` ways: every layer matmul / y, the unembedding
    (replicated) whole, on ``local_batch`` sequences; Adam on the ``held`` entries."""
    full = fl.train_flops(cfg, local_batch, seq_len)
    split = fl.FlopsBreakdown(full.mlp_flops / y, full.attn_proj_flops / y, full.attn_qk_flops / y,
                              full.attn_av_flops / y, full.router_flops, full.unembed_flops)
    return StepFlops(split, adam_flops(held))
