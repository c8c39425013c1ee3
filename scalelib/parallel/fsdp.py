"""ZeRO sharding, stages 1, 2 and 3 (FSDP): data parallelism without the duplicated state.

Book section 5.1.2 (Fully-Sharded Data Parallelism): In[B_X, D] . W_in[D_X, F] . W_out[F, D_X].
An AllReduce is a ReduceScatter followed by an AllGather, so the same bytes can leave each
device with the state split X ways:

* stage 1 (optimizer state sharded): backward AllReduces full gradients; each device updates its
  1/X slice of (params, mu, nu); an AllGather rebuilds the full weights for the next step.
* stage 2 (+ gradients): backward ReduceScatters the gradients instead, so each device only ever
  keeps its reduced slice; the same AllGather of the updated weights follows.
* stage 3 (+ weights, "FSDP"): weights live sharded. Forward: AllGather each layer's weights
  just before use. Backward: AllGather them again (they are not kept: a ``jax.checkpoint``
  policy drops every value named ``fsdp_weights``) and ReduceScatter each weight gradient,
  which is exactly the transpose JAX derives for the forward's tiled ``all_gather``.

Sharding rule (``shard_dim``): each array is split along its largest dimension that the axis
size divides, ignoring the leading layer axis L of per-layer arrays (weights are gathered one
layer at a time); ties go to the lower index; an array no dimension of which divides stays
replicated and its gradient is AllReduced. ``make_jit_step`` is the same FSDP through
``jax.jit`` and NamedShardings, leaving XLA's partitioner to insert the collectives.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import NamedSharding, PartitionSpec as P

from scalelib import compat, model, train
from scalelib.kernels.flash_attention import reference_attention
from scalelib.parallel.data import (Collective, MemoryPrediction, axes_size, check_batch, local_grads, nbytes,
                                    param_shapes, place, state_specs, replicated)
from scalelib.transformer import TransformerConfig
from scalelib.transformer_memory import training_state_memory

GATHERED = "fsdp_weights"  # checkpoint name of gathered weights: never saved, regathered in the backward
STAGES = (1, 2, 3)


def shard_dim(shape: tuple[int, ...], n: int, layered: bool, taken: int | None = None) -> int | None:
    """The dimension to split ``n`` ways (see module docstring), or None to replicate."""
    first = 1 if layered else 0
    ok = [d for d in range(first, len(shape)) if d != taken and shape[d] % n == 0]
    return max(ok, key=lambda d: (shape[d], -d)) if ok and n > 1 else None


def shard_dims(shapes, n: int, taken=None) -> dict:
    """Tree like ``shapes`` (params or their ShapeDtypeStructs) of each array's ``shard_dim`` (-1:
    replicated); ``taken`` (same tree, -1 for none) names a dim already used by another axis."""
    taken = taken or jax.tree.map(lambda _: -1, shapes)
    return {k: (jax.tree.map(lambda s, t: _or(shard_dim(s.shape, n, True, t)), v, taken[k]) if k == "layers"
                else _or(shard_dim(v.shape, n, False, taken[k]))) for k, v in shapes.items()}


def _or(d):
    return -1 if d is None else d


def dims_to_specs(dims, shapes, axis: str, base=None):
    """PartitionSpecs putting ``axis`` on each array's shard dim (on top of ``base`` specs, if given)."""
    def spec(d, s, b):
        parts = list(b) + [None] * (len(s.shape) - len(b)) if b is not None else [None] * len(s.shape)
        if d >= 0:
            parts[d] = axis
        return P(*parts)
    base = base if base is not None else jax.tree.map(lambda _: None, dims)
    return jax.tree.map(spec, dims, shapes, base, is_leaf=lambda x: x is None or isinstance(x, P))


def stack_loss(top: dict, layer_at: Callable[[int], dict], tokens: jax.Array, cfg: TransformerConfig,
               attn=None, mlp=None) -> jax.Array:
    """``model.loss`` with the weights supplied per layer (so a scheme can gather or shard them).

    ``top`` holds embed / final_norm / unembed; ``layer_at(i)`` returns layer i's weights.
    ``attn(p, x)`` and ``mlp(p, x)`` are the residual branches (default: the model's own blocks).
    """
    attn = attn or (lambda p, x: model.attention_block(cfg, p, x, reference_attention))
    mlp = mlp or (lambda p, x: model.mlp_block(cfg, p, x))
    x = top["embed"][tokens[:, :-1]]  # [b, T, D]
    for i in range(cfg.n_layers):
        p = layer_at(i)
        x = x + attn(p, x)  # [b, T, D]
        x = x + mlp(p, x)  # [b, T, D]
    if cfg.final_norm:
        x = model.norm(x, top["final_norm"], top.get("final_norm_bias"), cfg.norm_eps)  # [b, T, D]
    w_out = top["embed"].T if cfg.tied_embeddings else top["unembed"]  # [D, V]
    logp = jax.nn.log_softmax((x @ w_out).astype(jnp.float32), axis=-1)  # [b, T, V]
    return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0].mean()


def gathered_loss(shards: dict, tokens: jax.Array, cfg: TransformerConfig, dims: dict, axis: str, **blocks):
    """Loss with every sharded weight AllGathered over ``axis`` just before its layer uses it."""
    def gather(w, d):  # shard -> full weight, named so that the backward gathers it again
        return w if d < 0 else ad_checkpoint_name(lax.all_gather(w, axis, axis=d, tiled=True))
    top = {k: gather(v, dims[k]) for k, v in shards.items() if k != "layers"}
    layer_at = lambda i: {k: gather(v[i], d - 1 if d >= 0 else -1)  # noqa: E731  d-1: the L axis is gone
                          for (k, v), d in zip(shards["layers"].items(), dims["layers"].values())}
    return stack_loss(top, layer_at, tokens, cfg, **blocks)


def ad_checkpoint_name(x):
    return checkpoint_name(x, GATHERED)


REGATHER = jax.checkpoint_policies.save_anything_except_these_names(GATHERED)


def _check_stage(stage):
    if stage not in STAGES:
        raise ValueError(f"ZeRO stage must be one of {STAGES} (1: optimizer state, 2: + gradients, "
                         f"3: + weights), got {stage!r}")


def make_step(cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam(), *,
              stage: int = 3, axis: str = "data"):
    """Jitted ZeRO-``stage`` ``step(state, tokens) -> (state, loss)``; place inputs with ``shard_inputs``."""
    _check_stage(stage)
    n = axes_size(mesh.shape, axis)
    dims = shard_dims(param_shapes(cfg), n)
    idx = lambda: lax.axis_index(axis)  # noqa: E731

    def my_slice(x, d):  # this device's 1/X of a replicated array
        return x if d < 0 else lax.dynamic_slice_in_dim(x, idx() * (x.shape[d] // n), x.shape[d] // n, d)

    def local(state: train.TrainState, tokens: jax.Array):  # tokens [B/X, T+1] per device
        vary = lambda p, d: compat.pvary(p, axis) if (d < 0 or stage < 3) else p  # noqa: E731
        params = jax.tree.map(vary, state.params, dims)  # gradients below are this device's alone
        if stage == 3:
            fn = jax.checkpoint(lambda s, t: gathered_loss(s, t, cfg, dims, axis), policy=REGATHER)
            loss, grads = jax.value_and_grad(fn)(params, tokens)  # grads come back ReduceScattered
            g = jax.tree.map(lambda g, d: g / n if d >= 0 else lax.pmean(g, axis), grads, dims)
            p_mine = state.params
        else:
            loss, grads = local_grads(lambda p, t: model.loss(p, t, cfg), params, tokens, 1, (axis,))
            if stage == 1:  # AllReduce, then keep my slice
                g = jax.tree.map(lambda g, d: my_slice(lax.pmean(g, axis), d), grads, dims)
            else:  # ReduceScatter: only my slice of the sum ever exists
                g = jax.tree.map(lambda g, d: lax.pmean(g, axis) if d < 0 else
                                 lax.psum_scatter(g, axis, scatter_dimension=d, tiled=True) / n, grads, dims)
            p_mine = jax.tree.map(my_slice, state.params, dims)
        new, opt = train.adam_update(hp, g, state.opt, p_mine)  # on 1/X of every array
        if stage < 3:  # AllGather the updated slices back into full replicated weights
            new = jax.tree.map(lambda w, d: w if d < 0 else compat.all_gather_invariant(w, axis, axis=d, tiled=True),
                               new, dims)
        return train.TrainState(new, opt), lax.pmean(loss, axis)

    shapes = param_shapes(cfg)
    specs = dims_to_specs(dims, shapes, axis)
    spec = state_specs(shapes, specs if stage == 3 else replicated(shapes), specs)
    fn = compat.shard_map(local, mesh=mesh, in_specs=(spec, P(axis)), out_specs=(spec, P()))
    return jax.jit(fn)


def shard_inputs(state: train.TrainState, tokens: jax.Array, mesh: jax.sharding.Mesh, *, stage: int = 3,
                 axis: str = "data"):
    """Place state (sharded per ``stage``) and tokens [B, T+1] (split over ``axis``) on the mesh."""
    _check_stage(stage)
    n = axes_size(mesh.shape, axis)
    check_batch(tokens.shape[0], n, axis)
    specs = dims_to_specs(shard_dims(state.params, n), state.params, axis)
    spec = state_specs(state.params, specs if stage == 3 else replicated(state.params), specs)
    return place(state, mesh, spec), jax.device_put(tokens, NamedSharding(mesh, P(axis)))


def make_jit_step(cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam(), axis="data"):
    """FSDP the compiler's way: ``train.make_step`` under jit, state sharded by NamedSharding.

    Use an ``auto`` mesh (compat.make_mesh(..., kind="auto")): XLA's partitioner chooses where
    to AllGather weights and how to reduce gradients; compare its HLO with ``make_step``'s.
    """
    n = axes_size(mesh.shape, axis)
    specs = dims_to_specs(shard_dims(param_shapes(cfg), n), param_shapes(cfg), axis)
    spec = state_specs(param_shapes(cfg), specs)
    shard = jax.tree.map(lambda s: NamedSharding(mesh, s), spec, is_leaf=lambda s: isinstance(s, P))
    return jax.jit(train.make_step(cfg, hp), in_shardings=(shard, NamedSharding(mesh, P(axis))),
                   out_shardings=(shard, NamedSharding(mesh, P())))


def predicted_collectives(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                          stage: int = 3, axis: str = "data") -> tuple[Collective, ...]:
    """Per array: stage 1 AllReduce + AllGather, stage 2 ReduceScatter + AllGather, stage 3 per layer
    AllGather (forward), AllGather again (backward, all but the embedding, whose gradient is a
    scatter-add that never reads it) and ReduceScatter; replicated arrays AllReduce; + the loss."""
    _check_stage(stage)
    n = axes_size(mesh_shape, axis)
    check_batch(batch, n, axis)
    dims, shapes, ax, out = shard_dims(param_shapes(cfg), n), param_shapes(cfg), (axis,), []
    for path, s in jax.tree_util.tree_leaves_with_path(shapes):
        d = _lookup(dims, path)
        layered = path[0].key == "layers"
        full = nbytes(s)
        if d < 0:
            out.append(Collective("all_reduce", ax, full))
        elif stage < 3:
            first = Collective("all_reduce", ax, full) if stage == 1 else Collective("reduce_scatter", ax, full // n)
            out += [first, Collective("all_gather", ax, full, phase="optimizer")]
        else:
            uses = cfg.n_layers if layered else 1
            out.append(Collective("all_gather", ax, full // uses, uses, "forward"))
            if path[0].key != "embed":
                out.append(Collective("all_gather", ax, full // uses, uses, "backward"))
            out.append(Collective("reduce_scatter", ax, full // uses // n, uses))
    return tuple(out) + (Collective("all_reduce", ax, 4, phase="loss"),)


def _lookup(tree, path):
    for k in path:
        tree = tree[k.key]
    return tree


def predicted_memory_bytes(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                           stage: int = 3, axis: str = "data", dtype_bytes: int = 4) -> MemoryPrediction:
    """Per device: Adam moments 1/X (all stages), gradients 1/X from stage 2, weights 1/X at stage 3
    (arrays that stay replicated count in full)."""
    _check_stage(stage)
    n = axes_size(mesh_shape, axis)
    check_batch(batch, n, axis)
    dims, shapes = shard_dims(param_shapes(cfg), n), param_shapes(cfg)
    full = sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))
    mine = sum(math.prod(s.shape) // (n if d >= 0 else 1) for s, d in zip(jax.tree.leaves(shapes), jax.tree.leaves(dims)))
    sharded = training_state_memory(mine, param_bytes=dtype_bytes, adam_moment_bytes=dtype_bytes)
    whole = training_state_memory(full, param_bytes=dtype_bytes, adam_moment_bytes=dtype_bytes)
    return MemoryPrediction(int((sharded if stage == 3 else whole).params_bytes),
                            int((sharded if stage >= 2 else whole).grads_bytes),
                            int(sharded.optimizer_bytes) + 4, batch // n * (seq_len + 1) * 4)
