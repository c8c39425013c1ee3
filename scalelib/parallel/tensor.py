"""Megatron tensor parallelism, optionally with data parallelism on a second mesh axis.

Book section 5.1.3 (Tensor Parallelism): In[B, D] . W_in[D, F_Y] . W_out[F_Y, D] -> Out[B, D].
The book keeps activations D-sharded between blocks (AllGather in, ReduceScatter out); here
they stay replicated over Y between blocks, Megatron's form of the same thing, whose two
collectives fuse into one AllReduce (an AllReduce = ReduceScatter + AllGather, section 3):

* MLP: W_gate / W_up column-parallel [D, F_Y], W_down row-parallel [F_Y, D]; each device makes
  a partial Out[B, D]{U_Y}. Forward: one AllReduce (psum) of the block output.
  Backward: one AllReduce of dIn[B, D]{U_Y}: the transpose of ``compat.pvary`` (a psum)
  applied once to the normalized block input (Megatron's "f" operator; the psum is its "g").
* attention: heads sharded, W_Q [D, N_Y, H], W_K / W_V [D, K_Y, H], W_O [N_Y, H, D]; the same
  one AllReduce forward and one backward per block. Query head n uses KV head n // (N / K), so
  contiguous head shards stay aligned only if Y divides n_kv_heads. When it does not, the KV
  heads would have to be replicated on every device (and their gradients AllReduced); this
  module does not do that and raises instead.

Norm scales, embedding and unembedding are replicated over Y (the logits are computed whole on
every device). On a 2D mesh (data, model) the batch is split over ``data`` and the gradients
are AllReduced over it as in ``scalelib.parallel.data``.
"""

from __future__ import annotations

import math
from typing import Mapping

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from scalelib import compat, model, train
from scalelib.kernels.flash_attention import reference_attention
from scalelib.parallel.data import (Collective, MemoryPrediction, check_batch, nbytes, param_shapes, place,
                                    state_specs)
from scalelib.parallel.fsdp import dims_to_specs, stack_loss
from scalelib.transformer import TransformerConfig
from scalelib.transformer_memory import training_state_memory

# The dimension each per-layer array is split along over the model axis (with the L axis at 0).
TP_DIMS = {"wq": 2, "wk": 2, "wv": 2, "wo": 1, "bq": 1, "bk": 1, "bv": 1, "w_gate": 2, "w_up": 2, "w_down": 1}


def tp_dims(shapes) -> dict:
    """Tree like the params: each array's model-axis dim (TP_DIMS), -1 for the replicated ones."""
    return {k: ({n: TP_DIMS.get(n, -1) for n in v} if k == "layers" else -1) for k, v in shapes.items()}


def check_config(cfg: TransformerConfig, y: int) -> None:
    if cfg.is_moe:
        raise ValueError("tensor parallelism here covers dense MLPs; MoE layers belong to scalelib.parallel.expert")
    for name, value in (("n_heads", cfg.n_heads), ("n_kv_heads", cfg.n_kv_heads), ("d_ff", cfg.ff_width)):
        if value % y:
            raise ValueError(f"{name}={value} is not divisible by the model axis size {y}; pick a model axis that "
                             f"divides it (KV heads would otherwise have to be replicated, which is not done here)")


def blocks(cfg: TransformerConfig, axis: str):
    """(attn, mlp) residual branches for per-device weight shards: one psum forward, one backward each."""
    def attn(p, x):  # x [b, T, D] replicated over the model axis
        y = compat.pvary(model.norm(x, p["attn_norm"], p.get("attn_norm_bias"), cfg.norm_eps), axis)
        q = jnp.einsum("btd,dnh->btnh", y, p["wq"])  # [b, T, N/Y, H]
        k = jnp.einsum("btd,dkh->btkh", y, p["wk"])  # [b, T, K/Y, H]
        v = jnp.einsum("btd,dkh->btkh", y, p["wv"])  # [b, T, K/Y, H]
        if cfg.qkv_bias:
            q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]  # [b, T, heads/Y, H]
        pos = jnp.arange(x.shape[1])  # [T]
        q, k = model.rope(q, pos, cfg.rope_theta), model.rope(k, pos, cfg.rope_theta)  # [b, T, heads/Y, H]
        att = reference_attention(q, k, v, causal=True)  # [b, T, N/Y, H]
        out = lax.psum(jnp.einsum("btnh,nhd->btd", att, p["wo"]), axis)  # [b, T, D]: AllReduce of partial sums
        return out + p["bo"] if cfg.o_bias else out

    def mlp(p, x):  # x [b, T, D] replicated over the model axis
        y = compat.pvary(model.norm(x, p["mlp_norm"], p.get("mlp_norm_bias"), cfg.norm_eps), axis)
        act = jax.nn.silu if cfg.activation == "silu" else jax.nn.gelu
        up = y @ p["w_up"]  # [b, T, F/Y]: column-parallel
        hidden = act(y @ p["w_gate"]) * up if cfg.gated_mlp else act(up)  # [b, T, F/Y]
        return lax.psum(hidden @ p["w_down"], axis)  # [b, T, D]: row-parallel partial sums, AllReduced
    return attn, mlp


def _data_axis(mesh_shape: Mapping[str, int], model_axis: str) -> str | None:
    others = [a for a in mesh_shape if a != model_axis]
    if model_axis not in mesh_shape or len(others) > 1:
        raise ValueError(f"expected a mesh (model,) or (data, model) with model axis {model_axis!r}, got "
                         f"{dict(mesh_shape)}; build it with compat.make_mesh")
    return others[0] if others else None


def param_specs(shapes, model_axis: str = "model"):
    """PartitionSpecs putting ``model_axis`` on each array's TP_DIMS dim."""
    return dims_to_specs(tp_dims(shapes), shapes, model_axis)


def make_step(cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam(), *,
              model_axis: str = "model"):
    """Jitted ``step(state, tokens) -> (state, loss)``; mesh (model,) or (data, model)."""
    data_axis = _data_axis(mesh.shape, model_axis)
    check_config(cfg, mesh.shape[model_axis])
    attn, mlp = blocks(cfg, model_axis)
    shapes = param_shapes(cfg)

    def local(state: train.TrainState, tokens: jax.Array):  # tokens [B/X, T+1] per device
        params = state.params if data_axis is None else compat.pvary(state.params, data_axis)
        fn = lambda p, t: stack_loss({k: v for k, v in p.items() if k != "layers"},  # noqa: E731
                                     lambda i: jax.tree.map(lambda a: a[i], p["layers"]), t, cfg, attn, mlp)
        loss, grads = jax.value_and_grad(fn)(params, tokens)
        if data_axis is not None:  # data parallelism: AllReduce gradients and loss over X
            grads, loss = jax.tree.map(lambda g: lax.pmean(g, data_axis), (grads, loss))
        new, opt = train.adam_update(hp, grads, state.opt, state.params)
        return train.TrainState(new, opt), loss

    spec = state_specs(shapes, param_specs(shapes, model_axis))
    fn = compat.shard_map(local, mesh=mesh, in_specs=(spec, P(data_axis)), out_specs=(spec, P()))
    return jax.jit(fn)


def shard_inputs(state: train.TrainState, tokens: jax.Array, mesh: jax.sharding.Mesh, model_axis: str = "model"):
    data_axis = _data_axis(mesh.shape, model_axis)
    if data_axis is not None:
        check_batch(tokens.shape[0], mesh.shape[data_axis], data_axis)
    spec = state_specs(state.params, param_specs(state.params, model_axis))
    return place(state, mesh, spec), jax.device_put(tokens, NamedSharding(mesh, P(data_axis)))


def _local_elements(cfg, y: int) -> tuple[int, list]:
    shapes, dims = param_shapes(cfg), tp_dims(param_shapes(cfg))
    leaves = [(s, d) for s, d in zip(jax.tree.leaves(shapes), jax.tree.leaves(dims))]
    return sum(math.prod(s.shape) // (y if d >= 0 else 1) for s, d in leaves), leaves


def predicted_collectives(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                          model_axis: str = "model") -> tuple[Collective, ...]:
    """2 L AllReduces of [B/X, T, D] forward and 2 L backward over the model axis; with a data axis,
    one AllReduce per weight array (its 1/Y shard) and one for the loss over data."""
    data_axis = _data_axis(mesh_shape, model_axis)
    y, x = mesh_shape[model_axis], (mesh_shape[data_axis] if data_axis else 1)
    check_config(cfg, y)
    check_batch(batch, x, data_axis or "data")
    act = batch // x * seq_len * cfg.d_model * 4  # [B/X, T, D] float32
    out = [Collective("all_reduce", (model_axis,), act, 2 * cfg.n_layers, "forward"),
           Collective("all_reduce", (model_axis,), act, 2 * cfg.n_layers, "backward")]
    if data_axis is not None:
        out += [Collective("all_reduce", (data_axis,), nbytes(s) // (y if d >= 0 else 1))
                for s, d in _local_elements(cfg, y)[1]]
        out.append(Collective("all_reduce", (data_axis,), 4, phase="loss"))
    return tuple(out)


def predicted_memory_bytes(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                           model_axis: str = "model", dtype_bytes: int = 4) -> MemoryPrediction:
    """Per device: the 1/Y shards of the split arrays plus every replicated one, for params,
    gradients and both Adam moments alike."""
    data_axis = _data_axis(mesh_shape, model_axis)
    y, x = mesh_shape[model_axis], (mesh_shape[data_axis] if data_axis else 1)
    check_config(cfg, y)
    mem = training_state_memory(_local_elements(cfg, y)[0], param_bytes=dtype_bytes, adam_moment_bytes=dtype_bytes)
    return MemoryPrediction(int(mem.params_bytes), int(mem.grads_bytes), int(mem.optimizer_bytes) + 4,
                            batch // x * (seq_len + 1) * 4)
