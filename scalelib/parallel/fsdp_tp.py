"""Mixed FSDP x tensor parallelism on a 2D mesh (data X, model Y).

Book section 5.1.4 (Mixed FSDP and Tensor Parallelism):
In[B_X, D] . W_in[D_X, F_Y] . W_out[F_Y, D_X] -> Out[B_X, D]. Every weight is split both ways:
its TP dimension (``tensor.TP_DIMS``) over Y and, by ``fsdp.shard_dim``'s rule applied to the
remaining dimensions, another one over X, so no weight is stored twice.

* forward, per layer: AllGather_X of each weight's [.., D_X, F_Y] shard into [.., D, F_Y]
  (FSDP), then the tensor-parallel blocks with one AllReduce_Y of [B_X, T, D] each.
* backward, per layer: AllGather_X of the weights again (``fsdp.REGATHER``), one AllReduce_Y of
  dIn[B_X, T, D] per block, and a ReduceScatter_X of each weight gradient.

FSDP moves weights (shrunk Y-fold by TP) and TP moves activations (shrunk X-fold by the batch
split): the book's reason for combining them.
"""

from __future__ import annotations

import math
from typing import Mapping

import jax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from scalelib import compat, train
from scalelib.parallel import fsdp, tensor
from scalelib.parallel.data import (Collective, MemoryPrediction, check_batch, nbytes, param_shapes, place,
                                    state_specs)
from scalelib.transformer import TransformerConfig
from scalelib.transformer_memory import training_state_memory


def _axes(mesh_shape: Mapping[str, int], data_axis: str, model_axis: str) -> tuple[int, int]:
    if set(mesh_shape) != {data_axis, model_axis}:
        raise ValueError(f"FSDP x TP needs a 2D mesh with axes ({data_axis!r}, {model_axis!r}), got "
                         f"{dict(mesh_shape)}; build it with compat.make_mesh((X, Y), (data_axis, model_axis))")
    return mesh_shape[data_axis], mesh_shape[model_axis]


def layout(shapes, x: int, data_axis: str = "data", model_axis: str = "model"):
    """(FSDP dims over X, TP dims over Y, PartitionSpecs) for a params-like tree."""
    tp = tensor.tp_dims(shapes)
    dims = fsdp.shard_dims(shapes, x, taken=tp)
    return dims, tp, fsdp.dims_to_specs(dims, shapes, data_axis, base=tensor.param_specs(shapes, model_axis))


def make_step(cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam(), *,
              data_axis: str = "data", model_axis: str = "model"):
    """Jitted ``step(state, tokens) -> (state, loss)``; params and Adam moments sharded over both axes."""
    x, y = _axes(mesh.shape, data_axis, model_axis)
    tensor.check_config(cfg, y)
    shapes = param_shapes(cfg)
    dims, _, specs = layout(shapes, x, data_axis, model_axis)
    attn, mlp = tensor.blocks(cfg, model_axis)

    def local(state: train.TrainState, tokens: jax.Array):  # tokens [B/X, T+1] per device
        params = jax.tree.map(lambda p, d: p if d >= 0 else compat.pvary(p, data_axis), state.params, dims)
        fn = jax.checkpoint(lambda s, t: fsdp.gathered_loss(s, t, cfg, dims, data_axis, attn=attn, mlp=mlp),
                            policy=fsdp.REGATHER)
        loss, grads = jax.value_and_grad(fn)(params, tokens)  # sharded grads arrive ReduceScattered over X
        g = jax.tree.map(lambda g, d: g / x if d >= 0 else lax.pmean(g, data_axis), grads, dims)
        new, opt = train.adam_update(hp, g, state.opt, state.params)  # on [.._X, .._Y] shards
        return train.TrainState(new, opt), lax.pmean(loss, data_axis)

    spec = state_specs(shapes, specs)
    fn = compat.shard_map(local, mesh=mesh, in_specs=(spec, P(data_axis)), out_specs=(spec, P()))
    return jax.jit(fn)


def shard_inputs(state: train.TrainState, tokens: jax.Array, mesh: jax.sharding.Mesh, *,
                 data_axis: str = "data", model_axis: str = "model"):
    x, _ = _axes(mesh.shape, data_axis, model_axis)
    check_batch(tokens.shape[0], x, data_axis)
    spec = state_specs(state.params, layout(state.params, x, data_axis, model_axis)[2])
    return place(state, mesh, spec), jax.device_put(tokens, NamedSharding(mesh, P(data_axis)))


def _leaves(cfg, x):
    shapes = param_shapes(cfg)
    dims, tp, _ = layout(shapes, x)
    return list(zip(jax.tree_util.tree_leaves_with_path(shapes), jax.tree.leaves(dims), jax.tree.leaves(tp)))


def predicted_collectives(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                          data_axis: str = "data", model_axis: str = "model") -> tuple[Collective, ...]:
    """FSDP's gathers / scatters on the Y-shards (over X) plus TP's 4 L AllReduces of [B/X, T, D] (over Y)."""
    x, y = _axes(mesh_shape, data_axis, model_axis)
    tensor.check_config(cfg, y)
    check_batch(batch, x, data_axis)
    act = batch // x * seq_len * cfg.d_model * 4  # [B/X, T, D] float32
    out = [Collective("all_reduce", (model_axis,), act, 2 * cfg.n_layers, "forward"),
           Collective("all_reduce", (model_axis,), act, 2 * cfg.n_layers, "backward")]
    dx = (data_axis,)
    for (path, s), d, t in _leaves(cfg, x):
        local = nbytes(s) // (y if t >= 0 else 1)  # bytes of this device's model-axis slice, gathered over X
        if d < 0:
            out.append(Collective("all_reduce", dx, local))
            continue
        uses = cfg.n_layers if path[0].key == "layers" else 1
        out.append(Collective("all_gather", dx, local // uses, uses, "forward"))
        if path[0].key != "embed":
            out.append(Collective("all_gather", dx, local // uses, uses, "backward"))
        out.append(Collective("reduce_scatter", dx, local // uses // x, uses))
    return tuple(out) + (Collective("all_reduce", dx, 4, phase="loss"),)


def predicted_memory_bytes(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                           data_axis: str = "data", model_axis: str = "model", dtype_bytes: int = 4) -> MemoryPrediction:
    """Per device: every array divided by Y (if TP-split) and by X (if FSDP-split), for params,
    gradients and Adam moments alike."""
    x, y = _axes(mesh_shape, data_axis, model_axis)
    mine = sum(math.prod(s.shape) // (x if d >= 0 else 1) // (y if t >= 0 else 1) for (_, s), d, t in _leaves(cfg, x))
    mem = training_state_memory(mine, param_bytes=dtype_bytes, adam_moment_bytes=dtype_bytes)
    return MemoryPrediction(int(mem.params_bytes), int(mem.grads_bytes), int(mem.optimizer_bytes) + 4,
                            batch // x * (seq_len + 1) * 4)
