"""Expert parallelism: the MoE layer's experts split over an "expert" mesh axis, tokens routed by AllToAll.

Book sections 4.4.1 (mixture of experts: two AllToAlls per MoE block) and 3.3.1 (the AllToAll).
The batch is split over the same axis as the experts (data parallel everywhere else), which is
exactly when routing needs an AllToAll. Per MoE layer on each device:

1. route: router logits [n, E] -> top-k experts and weights per token;
2. dispatch: each (token, choice) takes the next free slot of its expert's queue, which holds
   C = ``capacity`` slots per sending device (tokens past C are dropped; C = n drops none);
   the filled buffer [E, C, D] is cut into one [E/X, C, D] block per device and exchanged with
   ``all_to_all`` (forward); the backward pass runs the same AllToAll in reverse;
3. the local E/X experts run on the [X, E/X, C, D] slots received from all X devices;
4. a second ``all_to_all`` sends the outputs home and the router weights combine them.

A full training step adds one ``psum`` (all-reduce) of the replicated weights' gradients; the
experts' gradients stay where the experts live (the rule ``("experts", expert)``). The result
equals ``scalelib.model.moe`` (dense dispatch) whenever no token is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from scalelib import compat, model
from scalelib import param_axes as pa
from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib.parallel import specs
from scalelib.parallel.common import MeshShape, is_spec, n_elements, place
from scalelib.parallel.flops import StepFlops, adam_flops
from scalelib.parallel.layer import LayerModel, LayerTerms
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.transformer import TransformerConfig, mlp_params_per_expert


def capacity(n_tokens: int, n_experts: int, experts_per_token: int, capacity_factor: float) -> int:
    """Slots per expert per sending device: ceil(factor * n * k / E), at most n (no more is useful).

    A factor of E / k gives C = n, so no token can ever be dropped.
    """
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor}")
    return min(n_tokens, math.ceil(capacity_factor * n_tokens * experts_per_token / n_experts))


def _routing(cfg: TransformerConfig, p: dict, x: jax.Array, cap: int) -> tuple[jax.Array, jax.Array]:
    """x [n, D] -> dispatch [n, E, C] (0/1) and combine [n, E, C] (router weights) masks."""
    logits = x @ p["router"]  # [n, E]
    if "router_bias" in p:
        logits = logits + p["router_bias"]  # [n, E]
    top_logits, top_idx = jax.lax.top_k(logits, cfg.experts_per_token)  # [n, k] each
    top_w = jax.nn.softmax(top_logits.astype(jnp.float32), axis=-1).astype(x.dtype)  # [n, k]
    chosen = jax.nn.one_hot(top_idx, cfg.n_experts, dtype=jnp.int32)  # [n, k, E]
    flat = chosen.reshape(-1, cfg.n_experts)  # [n*k, E] in (token, choice) order
    slot = (jnp.cumsum(flat, axis=0) - 1).reshape(chosen.shape)  # [n, k, E] queue position
    kept = chosen * (slot < cap)  # [n, k, E] dropped when the queue is full
    slots = jax.nn.one_hot(slot, cap, dtype=x.dtype) * kept[..., None]  # [n, k, E, C]
    return slots.sum(1), (slots * top_w[:, :, None, None]).sum(1)  # [n, E, C] each


def moe_local(cfg: TransformerConfig, p: dict, x: jax.Array, cap: int, axis: str = "expert") -> jax.Array:
    """Per-device body (inside shard_map): x [b, T, D] local tokens, experts [E/X, ...] -> [b, T, D]."""
    b, t, d = x.shape
    n_dev = jax.lax.psum(1, axis)
    tokens = x.reshape(b * t, d)  # [n, D]
    dispatch, combine = _routing(cfg, p, tokens, cap)  # [n, E, C] each
    send = jnp.einsum("nec,nd->ecd", dispatch, tokens)  # [E, C, D] slots, expert-major
    send = send.reshape(n_dev, cfg.n_experts // n_dev, cap, d)  # [X, E/X, C, D] one block per device
    recv = jax.lax.all_to_all(send, axis, 0, 0, tiled=True)  # [X(source), E/X, C, D]
    up = jnp.einsum("secd,edf->secf", recv, p["w_up"])  # [X, E/X, C, F]
    if "w_gate" in p:
        hidden = model.activation(cfg, jnp.einsum("secd,edf->secf", recv, p["w_gate"])) * up  # [X, E/X, C, F]
    else:
        hidden = model.activation(cfg, up)  # [X, E/X, C, F]
    out = jnp.einsum("secf,efd->secd", hidden, p["w_down"])  # [X, E/X, C, D]
    back = jax.lax.all_to_all(out, axis, 0, 0, tiled=True)  # [X(owner), E/X, C, D] = my slots again
    y = jnp.einsum("nec,ecd->nd", combine, back.reshape(cfg.n_experts, cap, d))  # [n, D]
    if "shared_w_up" in p:
        y = y + model.dense_mlp(cfg, tokens, p.get("shared_w_gate"), p["shared_w_up"], p["shared_w_down"])  # [n, D]
    return y.reshape(b, t, d)


@register
@dataclass(frozen=True)
class ExpertParallel(Scheme):
    """Experts and the batch split over ``axis``; ``capacity_factor`` sets the slots (E / k drops nothing)."""

    name = "expert"
    section = "4.4.1"
    check_vma = False  # the step psums the replicated weights' gradients itself (with the check on, JAX would too)

    capacity_factor: float = 1.25
    axis: str = "expert"

    def __post_init__(self) -> None:
        if not self.capacity_factor > 0:
            raise ValueError(f"capacity_factor must be > 0, got {self.capacity_factor}")

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return (self.axis,)

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        n_dev = mesh_shape[self.axis]
        if batch % n_dev:
            raise ValueError(f"batch {batch} must be a multiple of the '{self.axis}' axis size {n_dev} (tokens are "
                             "split over the same axis as the experts)")


    def check_model(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> None:
        if not cfg.is_moe:
            raise ValueError("expert parallelism needs an MoE config (n_experts > 0), got n_experts=0")
        if cfg.n_experts % mesh_shape[self.axis]:
            raise ValueError(f"n_experts={cfg.n_experts} must be a multiple of the '{self.axis}' axis size "
                             f"{mesh_shape[self.axis]}")

    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return (("experts", self.axis),)

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P(self.axis)

    def capacity(self, cfg: TransformerConfig, local_tokens: int) -> int:
        return capacity(local_tokens, cfg.n_experts, cfg.experts_per_token, self.capacity_factor)

    def layer_specs(self, layer: dict, mesh_shape: MeshShape) -> dict:
        """PartitionSpecs of one MoE layer's params (no L axis): experts split on E, the rest replicated."""
        return {k: specs.spec_of(pa.axes_of(k, moe=True)[1:], v.shape, self.param_rules(mesh_shape), mesh_shape)
                for k, v in layer.items()}

    def moe_layer(self, cfg: TransformerConfig, p: dict, x: jax.Array, mesh: jax.sharding.Mesh) -> jax.Array:
        """Global x [B, T, D] (batch split over the axis) -> [B, T, D]; differentiable, equals ``model.moe``."""
        shape = dict(mesh.shape)
        self.check(cfg, shape, x.shape[0])
        cap = self.capacity(cfg, x.shape[0] // shape[self.axis] * x.shape[1])
        layer_specs = self.layer_specs(p, shape)  # check_vma=False as in the step, so both run the same body
        f = compat.shard_map(lambda p_, x_: moe_local(cfg, p_, x_, cap, self.axis), mesh=mesh,
                             in_specs=(layer_specs, P(self.axis)), out_specs=P(self.axis), check_vma=False)
        return f(place(p, mesh, layer_specs), place(x, mesh, P(self.axis)))

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        axis, n_dev = self.axis, mesh_shape[self.axis]
        layer_specs = self.param_specs(model.param_shapes(cfg), mesh_shape)["layers"]
        experts = [k for k, s in layer_specs.items() if specs.mesh_axes_of(s)]

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B/X, T+1]
            cap = self.capacity(cfg, tokens.shape[0] * (tokens.shape[1] - 1))
            n_global = tokens.shape[0] * n_dev * (tokens.shape[1] - 1)
            hooks = model.LayerHooks(mlp=lambda p, y: moe_local(cfg, p, y, cap, axis))

            def local_loss(params: Any) -> jax.Array:
                x = params["embed"][tokens[:, :-1]]  # [b, T, D]
                x = model.run_layers(cfg, x, lambda i: model.layer_params(params, i), hooks=hooks)  # [b, T, D]
                return model.token_nll(cfg, params, x, tokens[:, 1:]).sum() / n_global

            loss, grads = jax.value_and_grad(local_loss)(params)
            own = {k: grads["layers"].pop(k) for k in experts}
            loss, grads = jax.lax.psum((loss, grads), axis)  # all-reduce of the replicated weights' grads
            grads["layers"].update(own)  # expert grads are already complete on their owner
            return loss, grads

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """Per step: 2 AllToAlls per MoE layer forward and 2 in backward, each moving a [E, C, D] buffer;
        one all-reduce of every replicated weight's gradient (plus the loss)."""
        self.check(cfg, mesh_shape, batch, seq_len)
        cap = self.capacity(cfg, batch // mesh_shape[self.axis] * seq_len)
        buf = cfg.n_experts * cap * cfg.d_model * 4
        shapes = model.param_shapes(cfg)
        leaves = zip(jax.tree.leaves(shapes), jax.tree.leaves(self.param_specs(shapes, mesh_shape), is_leaf=is_spec))
        replicated = sum(n_elements(s) for s, p in leaves if not specs.mesh_axes_of(p))
        two_per_layer = 2 * cfg.n_layers
        return (Collective("all_to_all", (self.axis,), buf, two_per_layer, phase="forward"),
                Collective("all_to_all", (self.axis,), buf, two_per_layer, phase="backward"),
                Collective("all_reduce", (self.axis,), (replicated + 1) * 4, 1, phase="backward"))

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """Per device: ``mlp_flops`` holds the routed experts on their E C slots and any shared experts
        on the n local tokens; ``router_flops`` the router and the one-hot dispatch and combine einsums
        (2 n E C D each; the dispatch mask has no gradient, so its einsum is differentiated for the
        tokens only). Adam on the device's experts and every replicated weight."""
        self.check(cfg, mesh_shape, batch, seq_len)
        n = batch // mesh_shape[self.axis] * seq_len  # local tokens
        cap = self.capacity(cfg, n)
        d, e, n_layers = cfg.d_model, cfg.n_experts, cfg.n_layers
        dense = fl.forward_flops(cfg.replace(n_experts=0, experts_per_token=0, n_shared_experts=0), n, seq_len)
        mlp = n_layers * 2 * (e * cap + n * cfg.n_shared_experts) * mlp_params_per_expert(cfg)  # [E, C] + shared
        router = n_layers * 2 * n * d * e
        one_hot = n_layers * 2 * n * e * cap * d  # dispatch [n, E, C] x [n, D] -> [E, C, D]; the combine alike
        fwd = fl.FlopsBreakdown(mlp, dense.attn_proj_flops, dense.attn_qk_flops, dense.attn_av_flops,
                                router + 2 * one_hot, dense.unembed_flops)
        train = fwd.scaled(3.0) + fl.FlopsBreakdown(0, 0, 0, 0, -one_hot, 0)  # the dispatch's mask has no gradient
        shapes = model.param_shapes(cfg)
        return StepFlops(train, adam_flops(specs.local_elements(shapes, self.param_specs(shapes, mesh_shape),
                                                                 mesh_shape)))

    @classmethod
    def check_layer(cls, layout: Layout, layer: LayerModel) -> None:
        if not layer.n_experts:
            raise ValueError("expert parallelism needs an MoE layer; build the LayerModel from a config with "
                             "n_experts > 0")

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """Each pass: two AllToAlls of the routed tokens (dispatch, combine) over the expert axes; the
        backward also AllReduces the chip's share of the weights over the data axes."""
        lay = t.layout
        routed = lay.expert_ways * t.tokens_per_chip * max(1, t.layer.experts_per_token) * t.layer.d_model * \
            t.dtype_bytes
        forward = 2 * t.time_s("all_to_all", routed, lay.expert_axes)
        return forward, forward + t.time_s("all_reduce", t.weight_bytes / lay.expert_ways, lay.data_axes)

    @classmethod
    def state_shards(cls, layout: Layout, cfg: TransformerConfig) -> float:
        """Only the experts' weights are split (the MLP share of the parameters)."""
        counts = tf.param_counts(cfg)
        expert_share = counts.mlp / counts.total
        return 1 / ((1 - expert_share) + expert_share / layout.expert_ways)

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        """For an MoE model: the most expert ways that divide both E and the chips, data parallel beside."""
        n_experts = ctx.layer.n_experts
        if not n_experts:
            return ()
        e = max(d for d in range(1, n_experts + 1) if n_experts % d == 0 and ctx.chips % d == 0)
        return (Layout(cls.name, data_axes=ctx.split(ctx.chips // e), expert_axes=(e,)),)
