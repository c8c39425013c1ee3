"""Sequence (context) parallelism: the sequence split over a "seq" mesh axis, attention made whole again.

Book section 5 (the note on context parallelism: for the MLP, tokens are tokens, so splitting the
sequence is data parallelism) and 4.7.1 (the online softmax that makes ring attention exact).
Each device holds T / X consecutive positions of every sequence. Everything but attention is
local. A query needs the keys of all earlier chunks, two ways:

* ``"all_gather"``: gather K and V [B, T, K, H] on every device, attend once (forward: AllGather
  of K and of V; backward: their transposes, ReduceScatters of dK and dV);
* ``"ring"``: keep a running softmax state, fold in the local K/V block, then pass the blocks one
  hop around the ring with ``ppermute`` X - 1 times (forward: 2 (X - 1) collective-permutes of a
  [B, T/X, K, H] block; backward: as many more carrying dK, dV the other way). Only one remote
  block is held at a time. Causal blocks from later chunks are fully masked but still computed
  here (the load imbalance that zig-zag chunk orders fix).

A training step adds one ``psum`` (all-reduce) of all gradients, as in data parallelism.
"""

from __future__ import annotations

import math
from typing import Literal

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, train
from scalelib.kernels.flash_attention import finalize_softmax_state, init_softmax_state, online_softmax_update
from scalelib.parallel.data import Collective, MemoryPrediction, memory_from_counts, param_shapes
from scalelib.transformer import TransformerConfig

AXIS = "seq"
Method = Literal["all_gather", "ring"]


def _fold(state, qg, k, v, q_pos, k_pos, scale):
    """Fold one key block into the running softmax: qg [B, K, G, r, H], k/v [B, K, c, H]."""
    scores = jnp.einsum("bkgrh,bkch->bkgrc", qg, k, precision=jax.lax.Precision.HIGHEST) * scale  # [B, K, G, r, c]
    scores = jnp.where(k_pos[None, :] <= q_pos[:, None], scores, -jnp.inf)  # [B, K, G, r, c] causal
    return online_softmax_update(state, scores, v[:, :, None])  # v: [B, K, 1, c, H]


def _check_method(method: str) -> None:
    if method not in ("all_gather", "ring"):
        raise ValueError(f"method must be 'all_gather' or 'ring', got {method!r}")


def attention_local(q: jax.Array, k: jax.Array, v: jax.Array, method: Method = "ring", axis: str = AXIS) -> jax.Array:
    """Causal attention of this device's chunk (inside shard_map): q [B, t, N, H], k/v [B, t, K, H] -> [B, t, N, H]."""
    _check_method(method)
    b, t, n, h = q.shape
    kh = k.shape[2]
    me, n_dev = jax.lax.axis_index(axis), jax.lax.psum(1, axis)
    q_pos = me * t + jnp.arange(t)  # [t] global positions of my queries
    qg = q.reshape(b, t, kh, n // kh, h).transpose(0, 2, 3, 1, 4)  # [B, K, G, t, H]
    kt, vt = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, K, t, H] each
    state = init_softmax_state(qg.shape[:-1], h, jnp.float32)
    if method == "all_gather":
        k_all = jax.lax.all_gather(kt, axis, axis=2, tiled=True)  # [B, K, T, H]
        v_all = jax.lax.all_gather(vt, axis, axis=2, tiled=True)  # [B, K, T, H]
        state = _fold(state, qg, k_all, v_all, q_pos, jnp.arange(k_all.shape[2]), h ** -0.5)
    else:
        ring = [(i, (i + 1) % n_dev) for i in range(n_dev)]
        for hop in range(n_dev):  # after `hop` passes I hold the block of device me - hop
            src = (me - hop) % n_dev
            state = _fold(state, qg, kt, vt, q_pos, src * t + jnp.arange(t), h ** -0.5)
            if hop < n_dev - 1:
                kt = jax.lax.ppermute(kt, axis, ring)  # [B, K, t, H] one hop on
                vt = jax.lax.ppermute(vt, axis, ring)  # [B, K, t, H]
    out, _ = finalize_softmax_state(state)  # [B, K, G, t, H]
    return out.transpose(0, 3, 1, 2, 4).reshape(b, t, n, h).astype(q.dtype)  # [B, t, N, H]


def attention(q: jax.Array, k: jax.Array, v: jax.Array, mesh, method: Method = "ring") -> jax.Array:
    """Global q [B, T, N, H], k/v [B, T, K, H] split on T -> causal attention [B, T, N, H]."""
    _check_method(method)
    n_dev = mesh.shape[AXIS]
    if q.shape[1] % n_dev or k.shape[1] != q.shape[1]:
        raise ValueError(f"sequence length {q.shape[1]} (keys {k.shape[1]}) must be equal and a multiple "
                         f"of the '{AXIS}' axis size {n_dev}")
    spec = P(None, AXIS)  # check_vma=False as in make_loss_and_grads, so both run the same body
    f = compat.shard_map(lambda *a: attention_local(*a, method=method), mesh=mesh, in_specs=(spec,) * 3,
                         out_specs=spec, check_vma=False)
    return f(*(jax.device_put(a, NamedSharding(mesh, spec)) for a in (q, k, v)))  # no-op when already placed


def _attention_block(cfg: TransformerConfig, p: dict, x: jax.Array, method: Method) -> jax.Array:
    """``model.attention_block`` for a chunk x [B, t, D]: RoPE at global positions, sharded attention."""
    y = model.norm(x, p["attn_norm"], p.get("attn_norm_bias"), cfg.norm_eps)  # [B, t, D]
    q = jnp.einsum("btd,dnh->btnh", y, p["wq"])  # [B, t, N, H]
    k = jnp.einsum("btd,dkh->btkh", y, p["wk"])  # [B, t, K, H]
    v = jnp.einsum("btd,dkh->btkh", y, p["wv"])  # [B, t, K, H]
    if cfg.qkv_bias:
        q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]  # broadcast over [B, t]
    positions = jax.lax.axis_index(AXIS) * x.shape[1] + jnp.arange(x.shape[1])  # [t]
    q, k = model.rope(q, positions, cfg.rope_theta), model.rope(k, positions, cfg.rope_theta)  # [B, t, N|K, H]
    out = jnp.einsum("btnh,nhd->btd", attention_local(q, k, v, method), p["wo"])  # [B, t, D]
    return out + p["bo"] if cfg.o_bias else out


def shard_state(state: train.TrainState, mesh) -> train.TrainState:
    """Every weight and Adam moment (any pytree) is replicated: only the sequence is split."""
    return jax.device_put(state, NamedSharding(mesh, P()))


def make_loss_and_grads(cfg: TransformerConfig, mesh, method: Method = "ring"):
    """``f(params, tokens [B, T+1]) -> (loss, grads)`` with T split over the ``seq`` axis."""
    _check_method(method)
    n_dev = mesh.shape[AXIS]

    def body(params, inputs, targets):  # inputs, targets [B, t]
        n_global = inputs.size * n_dev

        def local_loss(params):
            x = params["embed"][inputs]  # [B, t, D]
            for i in range(cfg.n_layers):
                p = jax.tree.map(lambda a: a[i], params["layers"])
                x = x + _attention_block(cfg, p, x, method)  # [B, t, D]
                x = x + model.mlp_block(cfg, p, x)  # [B, t, D] purely local
            if cfg.final_norm:
                x = model.norm(x, params["final_norm"], params.get("final_norm_bias"), cfg.norm_eps)  # [B, t, D]
            w_out = params["embed"].T if cfg.tied_embeddings else params["unembed"]  # [D, V]
            logp = jax.nn.log_softmax((x @ w_out).astype(jnp.float32), axis=-1)  # [B, t, V]
            return -jnp.take_along_axis(logp, targets[..., None], axis=-1).sum() / n_global

        loss, grads = jax.value_and_grad(local_loss)(params)
        return jax.lax.psum((loss, grads), AXIS)  # all-reduce: every device saw other tokens

    def loss_and_grads(params, tokens):
        t = tokens.shape[1] - 1
        if t % n_dev:
            raise ValueError(f"sequence length {t} (tokens [B, T+1]) must be a multiple of the '{AXIS}' "
                             f"axis size {n_dev}")
        put = lambda a: jax.device_put(a, NamedSharding(mesh, P(None, AXIS)))  # noqa: E731
        # check_vma=False: we psum the replicated weights' grads ourselves; with the check on, JAX sums
        # them already (transpose of its implicit pvary) and the psum doubles them (seen in testing).
        f = compat.shard_map(body, mesh=mesh, in_specs=(P(), P(None, AXIS), P(None, AXIS)), out_specs=(P(), P()),
                             check_vma=False)
        return f(jax.device_put(params, NamedSharding(mesh, P())), put(tokens[:, :-1]), put(tokens[:, 1:]))

    return loss_and_grads


def make_step(cfg: TransformerConfig, mesh, method: Method = "ring", hp: train.Adam = train.Adam()):
    """``step(state, tokens) -> (state, loss)``, equal to ``train.make_step(cfg, hp)``."""
    loss_and_grads = make_loss_and_grads(cfg, mesh, method)

    def step(state: train.TrainState, tokens: jax.Array):
        loss, grads = loss_and_grads(state.params, tokens)
        params, opt = train.adam_update(hp, grads, state.opt, state.params)
        return train.TrainState(params, opt), loss

    return step


def predicted_collectives(cfg: TransformerConfig, n_devices: int, batch: int, seq_len: int, method: Method = "ring",
                          bytes_per_elem: int = 4) -> tuple[Collective, ...]:
    """Per step, with L layers and a K/V block of B (T/X) K H elements: see the module docstring."""
    block = batch * seq_len // n_devices * cfg.n_kv_heads * cfg.head_dim * bytes_per_elem
    n_params = model.param_count(jax.eval_shape(lambda: model.init(jax.random.key(0), cfg)))
    reduce = Collective("all_reduce", (AXIS,), (n_params + 1) * bytes_per_elem, 1, phase="backward")
    L = cfg.n_layers
    if method == "all_gather":
        return (Collective("all_gather", (AXIS,), block * n_devices, 2 * L, phase="forward"),
                Collective("reduce_scatter", (AXIS,), block, 2 * L, phase="backward"), reduce)
    hops = 2 * (n_devices - 1) * L  # K and V, X - 1 hops, every layer
    return (Collective("collective_permute", (AXIS,), block, hops, phase="forward"),
            Collective("collective_permute", (AXIS,), block, hops, phase="backward"), reduce)


def predicted_memory_bytes(cfg: TransformerConfig, n_devices: int, batch: int, seq_len: int,
                           dtype_bytes: int = 4) -> MemoryPrediction:
    """Per-device bytes as ``shard_state`` and ``make_step`` lay them out.

    Only activations are split over the sequence: every weight, Adam moment and the int32 step
    counter is replicated. The tokens [B, T+1] also arrive replicated (the step slices inputs and
    targets and splits them itself), so each device holds all B (T+1) of them.
    """
    if seq_len % n_devices:
        raise ValueError(f"sequence length {seq_len} must be a multiple of the '{AXIS}' axis size {n_devices}")
    per_device = sum(math.prod(x.shape) for x in jax.tree.leaves(param_shapes(cfg)))
    return memory_from_counts(per_device, batch, seq_len, dtype_bytes=dtype_bytes)
