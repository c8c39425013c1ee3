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

A training step adds one ``psum`` (all-reduce) of all gradients, as in data parallelism. The
tokens arrive whole on every device: split on the sequence, the one-token shift of the targets
would itself need a collective-permute between neighbouring chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, placement
from scalelib import transformer_flops as fl
from scalelib.kernels.flash_attention import finalize_softmax_state, init_softmax_state, online_softmax_update
from scalelib.parallel import specs
from scalelib.parallel.common import MeshShape, n_elements
from scalelib.parallel.flops import StepFlops, adam_flops
from scalelib.parallel.layer import LayerTerms
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.transformer import TransformerConfig

Method = Literal["all_gather", "ring"]
METHODS: tuple[str, ...] = ("all_gather", "ring")


def _fold(state: Any, qg: jax.Array, k: jax.Array, v: jax.Array, q_pos: jax.Array, k_pos: jax.Array,
          scale: float) -> Any:
    """Fold one key block into the running softmax: qg [B, K, G, r, H], k/v [B, K, c, H]."""
    scores = jnp.einsum("bkgrh,bkch->bkgrc", qg, k, precision=jax.lax.Precision.HIGHEST) * scale  # [B, K, G, r, c]
    scores = jnp.where(k_pos[None, :] <= q_pos[:, None], scores, -jnp.inf)  # [B, K, G, r, c] causal
    return online_softmax_update(state, scores, v[:, :, None])  # v: [B, K, 1, c, H]


def _check_method(method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be 'all_gather' or 'ring', got {method!r}")


def attention_local(q: jax.Array, k: jax.Array, v: jax.Array, method: Method = "ring", axis: str = "seq",
                    causal: bool = True) -> jax.Array:
    """Causal attention of this device's chunk (inside shard_map): q [B, t, N, H], k/v [B, t, K, H] -> [B, t, N, H]."""
    _check_method(method)
    if not causal:
        raise ValueError("sequence-parallel attention here is causal only")
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


@register
@dataclass(frozen=True)
class SequenceParallel(Scheme):
    """The sequence split over ``axis``; attention by ``method`` ("ring" or "all_gather")."""

    name = "sequence"
    section = "5 (context parallelism), 4.7.1"
    check_vma = False  # the step psums the replicated weights' gradients itself (with the check on, JAX would too)

    method: Method = "ring"
    axis: str = "seq"

    def __post_init__(self) -> None:
        _check_method(self.method)

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return (self.axis,)

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        n_dev = mesh_shape[self.axis]
        if seq_len % n_dev:
            raise ValueError(f"sequence length {seq_len} (tokens [B, T+1]) must be a multiple of the '{self.axis}' "
                             f"axis size {n_dev}")


    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.REPLICATED

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P()

    def hooks(self, chunk: int) -> model.LayerHooks:
        """Layer hooks for a chunk of ``chunk`` positions: RoPE at global positions, sharded attention."""
        axis, method = self.axis, self.method
        return model.LayerHooks(
            attention_fn=lambda q, k, v, causal=True: attention_local(q, k, v, method, axis, causal),
            positions=lambda t: jax.lax.axis_index(axis) * chunk + jnp.arange(t))

    def attention(self, q: jax.Array, k: jax.Array, v: jax.Array, mesh: jax.sharding.Mesh) -> jax.Array:
        """Global q [B, T, N, H], k/v [B, T, K, H] split on T -> causal attention [B, T, N, H]."""
        n_dev = mesh.shape[self.axis]
        if q.shape[1] % n_dev or k.shape[1] != q.shape[1]:
            raise ValueError(f"sequence length {q.shape[1]} (keys {k.shape[1]}) must be equal and a multiple "
                             f"of the '{self.axis}' axis size {n_dev}")
        spec = P(None, self.axis)  # check_vma=False as in the step, so both run the same body
        f = compat.shard_map(lambda q_, k_, v_: attention_local(q_, k_, v_, self.method, self.axis), mesh=mesh,
                             in_specs=(spec,) * 3, out_specs=spec, check_vma=False)
        return f(*(placement.put(a, NamedSharding(mesh, spec)) for a in (q, k, v)))  # no-op when already placed

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        axis, n_dev = self.axis, mesh_shape[self.axis]

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B, T+1] whole
            self.check_batch(tokens.shape[0], tokens.shape[1] - 1, mesh_shape)
            t = (tokens.shape[1] - 1) // n_dev
            start = jax.lax.axis_index(axis) * t
            inputs = jax.lax.dynamic_slice_in_dim(tokens[:, :-1], start, t, axis=1)  # [B, t] my chunk
            targets = jax.lax.dynamic_slice_in_dim(tokens[:, 1:], start, t, axis=1)  # [B, t]
            n_global = inputs.size * n_dev
            hooks = self.hooks(t)

            def local_loss(params: Any) -> jax.Array:
                x = params["embed"][inputs]  # [B, t, D]
                x = model.run_layers(cfg, x, lambda i: model.layer_params(params, i), hooks=hooks)  # [B, t, D]
                return model.token_nll(cfg, params, x, targets).sum() / n_global

            loss, grads = jax.value_and_grad(local_loss)(params)
            return jax.lax.psum((loss, grads), axis)  # all-reduce: every device saw other tokens

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """Per step, with L layers and a K/V block of B (T/X) K H elements: see the module docstring."""
        self.check(cfg, mesh_shape, batch, seq_len)
        n_devices = mesh_shape[self.axis]
        block = batch * seq_len // n_devices * cfg.n_kv_heads * cfg.head_dim * 4
        weights_and_loss = (n_elements(model.param_shapes(cfg)) + 1) * 4
        reduce = Collective("all_reduce", (self.axis,), weights_and_loss, 1, phase="backward")
        n_layers = cfg.n_layers
        if self.method == "all_gather":
            return (Collective("all_gather", (self.axis,), block * n_devices, 2 * n_layers, phase="forward"),
                    Collective("reduce_scatter", (self.axis,), block, 2 * n_layers, phase="backward"), reduce)
        hops = 2 * (n_devices - 1) * n_layers  # K and V, X - 1 hops, every layer
        return (Collective("collective_permute", (self.axis,), block, hops, phase="forward"),
                Collective("collective_permute", (self.axis,), block, hops, phase="backward"), reduce)

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """Per device: every matmul on its B T / X tokens, each query against all T keys (the ring folds
        the masked blocks too), and Adam on every (replicated) weight."""
        self.check(cfg, mesh_shape, batch, seq_len)
        local = batch * seq_len // mesh_shape[self.axis]
        matmuls = fl.forward_flops(cfg, local, seq_len, moe_compute="dense").scaled(3.0)
        return StepFlops(matmuls, adam_flops(n_elements(model.param_shapes(cfg))))

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """In section 5's MLP-only layer, tokens are tokens: the sequence split is data parallelism (a
        backward AllReduce of V_w over the axes holding different tokens). Attention's K/V exchange is
        outside that model."""
        return 0.0, t.time_s("all_reduce", t.weight_bytes, t.layout.data_axes)
