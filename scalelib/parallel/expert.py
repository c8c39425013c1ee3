"""Expert parallelism: the MoE layer's experts split over an "expert" mesh axis, tokens routed by AllToAll.

Book sections 4.4.1 (mixture of experts: two AllToAlls per MoE block) and 3.3.1 (the AllToAll).
The batch is split over the same axis as the experts (data parallel everywhere else), which is
exactly when routing needs an AllToAll. Per MoE layer on each device:

1. route: router logits [n, E] -> top-k experts and weights per token;
2. dispatch: each (token, choice) takes the next free slot of its expert's queue, which holds
   C = ``capacity`` slots per sending device (tokens past C would be dropped; tests pick C = n);
   the filled buffer [E, C, D] is cut into one [E/X, C, D] block per device and exchanged with
   ``all_to_all`` (forward); the backward pass runs the same AllToAll in reverse;
3. the local E/X experts run on the [X, E/X, C, D] slots received from all X devices;
4. a second ``all_to_all`` sends the outputs home and the router weights combine them.

A full training step adds one ``psum`` (all-reduce) of the replicated weights' gradients; the
experts' gradients stay where the experts live. The result equals ``scalelib.model.moe`` (dense
dispatch) whenever no token is dropped.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, train
from scalelib.kernels.flash_attention import reference_attention
from scalelib.parallel.data import Collective, MemoryPrediction, memory_from_counts, param_shapes
from scalelib.transformer import TransformerConfig

AXIS = "expert"
EXPERT_WEIGHTS = ("w_gate", "w_up", "w_down")  # [L, E, ...]: split on E


def capacity(n_tokens: int, n_experts: int, experts_per_token: int, capacity_factor: float) -> int:
    """Slots per expert per sending device: ceil(factor * n * k / E), at most n (no more is useful).

    A factor of E / k gives C = n, so no token can ever be dropped.
    """
    if capacity_factor <= 0:
        raise ValueError(f"capacity_factor must be > 0, got {capacity_factor}")
    return min(n_tokens, math.ceil(capacity_factor * n_tokens * experts_per_token / n_experts))


def _routing(cfg: TransformerConfig, p: dict, x: jax.Array, cap: int):
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
    place = jax.nn.one_hot(slot, cap, dtype=x.dtype) * kept[..., None]  # [n, k, E, C]
    return place.sum(1), (place * top_w[:, :, None, None]).sum(1)  # [n, E, C] each


def moe_local(cfg: TransformerConfig, p: dict, x: jax.Array, cap: int, axis: str = AXIS) -> jax.Array:
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
        hidden = model._act(cfg, jnp.einsum("secd,edf->secf", recv, p["w_gate"])) * up  # [X, E/X, C, F]
    else:
        hidden = model._act(cfg, up)  # [X, E/X, C, F]
    out = jnp.einsum("secf,efd->secd", hidden, p["w_down"])  # [X, E/X, C, D]
    back = jax.lax.all_to_all(out, axis, 0, 0, tiled=True)  # [X(owner), E/X, C, D] = my slots again
    y = jnp.einsum("nec,ecd->nd", combine, back.reshape(cfg.n_experts, cap, d))  # [n, D]
    if "shared_w_up" in p:
        y = y + model._mlp(cfg, tokens, p.get("shared_w_gate"), p["shared_w_up"], p["shared_w_down"])  # [n, D]
    return y.reshape(b, t, d)


def _check(cfg: TransformerConfig, n_dev: int, batch: int) -> None:
    if not cfg.is_moe:
        raise ValueError("expert parallelism needs an MoE config (n_experts > 0), got n_experts=0")
    if cfg.n_experts % n_dev:
        raise ValueError(f"n_experts={cfg.n_experts} must be a multiple of the '{AXIS}' axis size {n_dev}")
    if batch % n_dev:
        raise ValueError(f"batch {batch} must be a multiple of the '{AXIS}' axis size {n_dev} (tokens are "
                         "split over the same axis as the experts)")


def layer_specs(layer: dict) -> dict:
    """PartitionSpecs of one MoE layer's params (no L axis): experts split on E, the rest replicated."""
    return {k: P(AXIS) if k in EXPERT_WEIGHTS else P() for k in layer}


def param_specs(params: model.Params) -> dict:
    """PartitionSpecs of full model params: [L, E, ...] expert weights split on E, the rest replicated."""
    specs = jax.tree.map(lambda _: P(), params)
    specs["layers"] = {k: P(None, AXIS) if k in EXPERT_WEIGHTS else P() for k in params["layers"]}
    return specs


def moe_layer(cfg: TransformerConfig, p: dict, x: jax.Array, mesh, capacity_factor: float) -> jax.Array:
    """Global x [B, T, D] (batch split over the axis) -> [B, T, D]; differentiable, equals ``model.moe``."""
    _check(cfg, mesh.shape[AXIS], x.shape[0])
    cap = capacity(x.shape[0] // mesh.shape[AXIS] * x.shape[1], cfg.n_experts, cfg.experts_per_token,
                   capacity_factor)
    specs = layer_specs(p)  # check_vma=False as in make_loss_and_grads, so both run the same body
    f = compat.shard_map(lambda p_, x_: moe_local(cfg, p_, x_, cap), mesh=mesh,
                         in_specs=(specs, P(AXIS)), out_specs=P(AXIS), check_vma=False)
    return f(_put(p, specs, mesh), _put(x, P(AXIS), mesh))


def _put(tree, specs, mesh):
    """Place (or, under jit, reshard) arrays as shard_map's in_specs expect; a no-op when already there."""
    return jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), tree, specs)


def shard_state(state: train.TrainState, mesh) -> train.TrainState:
    """Place a ``train.TrainState`` as ``param_specs`` says (Adam moments like their params)."""
    specs = param_specs(state.params)
    opt = train.AdamState(_put(state.opt.count, P(), mesh), _put(state.opt.mu, specs, mesh),
                          _put(state.opt.nu, specs, mesh))
    return train.TrainState(_put(state.params, specs, mesh), opt)


def make_loss_and_grads(cfg: TransformerConfig, mesh, capacity_factor: float):
    """``f(params, tokens [B, T+1]) -> (loss, grads)`` with every MoE layer expert-parallel."""
    n_dev = mesh.shape[AXIS]

    def body(params, tokens):  # tokens [B/X, T+1]
        cap = capacity(tokens.shape[0] * (tokens.shape[1] - 1), cfg.n_experts, cfg.experts_per_token,
                       capacity_factor)
        n_global = tokens.shape[0] * n_dev * (tokens.shape[1] - 1)

        def local_loss(params):
            x = params["embed"][tokens[:, :-1]]  # [b, T, D]
            for i in range(cfg.n_layers):
                p = jax.tree.map(lambda a: a[i], params["layers"])
                x = x + model.attention_block(cfg, p, x, reference_attention)  # [b, T, D]
                y = model.norm(x, p["mlp_norm"], p.get("mlp_norm_bias"), cfg.norm_eps)  # [b, T, D]
                x = x + moe_local(cfg, p, y, cap)  # [b, T, D]
            if cfg.final_norm:
                x = model.norm(x, params["final_norm"], params.get("final_norm_bias"), cfg.norm_eps)  # [b, T, D]
            w_out = params["embed"].T if cfg.tied_embeddings else params["unembed"]  # [D, V]
            logp = jax.nn.log_softmax((x @ w_out).astype(jnp.float32), axis=-1)  # [b, T, V]
            return -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1).sum() / n_global

        loss, grads = jax.value_and_grad(local_loss)(params)
        experts = {k: grads["layers"].pop(k) for k in EXPERT_WEIGHTS if k in grads["layers"]}
        loss, grads = jax.lax.psum((loss, grads), AXIS)  # all-reduce of the replicated weights' grads
        grads["layers"].update(experts)  # expert grads are already complete on their owner
        return loss, grads

    def loss_and_grads(params, tokens):
        _check(cfg, n_dev, tokens.shape[0])
        specs = param_specs(params)
        # check_vma=False: we psum the replicated weights' grads ourselves; with the check on, JAX
        # would already have summed them (transpose of its implicit pvary) and the psum would double them.
        f = compat.shard_map(body, mesh=mesh, in_specs=(specs, P(AXIS)), out_specs=(P(), specs), check_vma=False)
        return f(_put(params, specs, mesh), _put(tokens, P(AXIS), mesh))

    return loss_and_grads


def make_step(cfg: TransformerConfig, mesh, capacity_factor: float, hp: train.Adam = train.Adam()):
    """``step(state, tokens) -> (state, loss)``, equal to ``train.make_step(cfg, hp)`` when nothing drops."""
    loss_and_grads = make_loss_and_grads(cfg, mesh, capacity_factor)

    def step(state: train.TrainState, tokens: jax.Array):
        loss, grads = loss_and_grads(state.params, tokens)
        params, opt = train.adam_update(hp, grads, state.opt, state.params)  # elementwise, on each shard
        return train.TrainState(params, opt), loss

    return step


def predicted_collectives(cfg: TransformerConfig, n_devices: int, batch: int, seq_len: int, capacity_factor: float,
                          bytes_per_elem: int = 4) -> tuple[Collective, ...]:
    """Per step: 2 AllToAlls per MoE layer forward and 2 in backward, each moving a [E, C, D] buffer;
    one all-reduce of every replicated weight's gradient (plus the loss)."""
    n = batch // n_devices * seq_len
    cap = capacity(n, cfg.n_experts, cfg.experts_per_token, capacity_factor)
    buf = cfg.n_experts * cap * cfg.d_model * bytes_per_elem
    f, d, L = cfg.ff_width, cfg.d_model, cfg.n_layers
    expert_params = L * cfg.n_experts * d * f * (3 if cfg.gated_mlp else 2)
    params = model.param_count(jax.eval_shape(lambda: model.init(jax.random.key(0), cfg)))
    return (Collective("all_to_all", (AXIS,), buf, 2 * L, phase="forward"),
            Collective("all_to_all", (AXIS,), buf, 2 * L, phase="backward"),
            Collective("all_reduce", (AXIS,), (params - expert_params + 1) * bytes_per_elem, 1, phase="backward"))


def predicted_memory_bytes(cfg: TransformerConfig, n_devices: int, batch: int, seq_len: int,
                           dtype_bytes: int = 4) -> MemoryPrediction:
    """Per-device bytes as ``shard_state`` and ``make_step`` lay them out.

    The expert weights [L, E, ...] keep E / X experts on each device; every other weight (attention,
    router, shared experts, embeddings, norms) is replicated. Adam's moments follow the params,
    the int32 step counter is replicated, and each device receives B / X rows of tokens [T+1].
    """
    _check(cfg, n_devices, batch)
    shapes = param_shapes(cfg)
    per_device = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    per_device -= sum(math.prod(shapes["layers"][k].shape) * (n_devices - 1) // n_devices
                      for k in EXPERT_WEIGHTS if k in shapes["layers"])
    return memory_from_counts(per_device, batch // n_devices, seq_len, dtype_bytes=dtype_bytes)
