"""Single-device training step: the reference every parallel scheme is checked against.

Book section 5 (How to Parallelize a Transformer for Training) compares each sharding strategy with
plain training on one chip; this module is that one chip. A step computes the loss and gradients of
``scalelib.model.loss`` and applies Adam (written out here so its state is a plain pytree that a
scheme can shard: ZeRO-1/2/3 shard exactly these ``mu`` and ``nu`` arrays).

All functions are pure: ``step(state, tokens) -> (state, loss)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from scalelib import model
from scalelib.transformer import TransformerConfig

Params = Any  # a pytree of arrays


@dataclass(frozen=True)
class Adam:
    """Adam hyper-parameters (no weight decay; bias-corrected moments)."""

    learning_rate: float = 1e-2
    b1: float = 0.9
    b2: float = 0.95
    eps: float = 1e-8


class AdamState(NamedTuple):
    count: jax.Array  # type: ignore[assignment]  # [] int32 (shadows tuple.count, which nothing here uses)
    mu: Params  # first moments, same tree and shapes as params
    nu: Params  # second moments


class TrainState(NamedTuple):
    params: Params
    opt: AdamState


def adam_init(params: Params) -> AdamState:
    zeros = jax.tree.map(jnp.zeros_like, params)
    return AdamState(count=jnp.zeros((), jnp.int32), mu=zeros, nu=jax.tree.map(jnp.zeros_like, params))


def adam_update(hp: Adam, grads: Params, opt: AdamState, params: Params) -> tuple[Params, AdamState]:
    """One Adam step; elementwise, so it can run on any shard of (params, grads, mu, nu) alike."""
    count = opt.count + 1
    mu = jax.tree.map(lambda m, g: hp.b1 * m + (1 - hp.b1) * g, opt.mu, grads)
    nu = jax.tree.map(lambda v, g: hp.b2 * v + (1 - hp.b2) * g * g, opt.nu, grads)
    c1 = 1 - hp.b1 ** count.astype(jnp.float32)
    c2 = 1 - hp.b2 ** count.astype(jnp.float32)
    new = jax.tree.map(lambda p, m, v: p - hp.learning_rate * (m / c1) / (jnp.sqrt(v / c2) + hp.eps), params, mu, nu)
    return new, AdamState(count=count, mu=mu, nu=nu)


def init_state(key: jax.Array, cfg: TransformerConfig, dtype: Any = jnp.float32) -> TrainState:
    """Random parameters (``model.init``) and Adam's zero moments, as one compiled program per (config, dtype)."""
    return _init_state_compiled(key, cfg, dtype)  # (a config model.init refuses raises while it is traced)


def _init_state(key: jax.Array, cfg: TransformerConfig, dtype: Any) -> TrainState:
    params = model.init(key, cfg, dtype)
    return TrainState(params=params, opt=adam_init(params))


_init_state_compiled = jax.jit(_init_state, static_argnums=(1, 2))


def loss_and_grads(params: Params, tokens: jax.Array, cfg: TransformerConfig,
                   **forward_kw: Any) -> tuple[jax.Array, Params]:
    """Mean next-token loss over tokens [B, T+1] and its gradient."""
    return jax.value_and_grad(model.loss)(params, tokens, cfg, **forward_kw)


def make_step(cfg: TransformerConfig, hp: Adam = Adam(), return_grads: bool = False,
              **forward_kw: Any) -> Callable[[TrainState, jax.Array], tuple]:
    """The reference step: loss and grads on the whole batch, then Adam. It returns ``(state, loss)``, or with
    ``return_grads`` ``(state, loss, grads)``: the gradients Adam applied, from the same program (a test that
    compares them needs no second compile)."""

    def step(state: TrainState, tokens: jax.Array) -> tuple:
        loss, grads = loss_and_grads(state.params, tokens, cfg, **forward_kw)
        params, opt = adam_update(hp, grads, state.opt, state.params)
        return (TrainState(params, opt), loss) + ((grads,) if return_grads else ())

    return step


def batch(key: jax.Array, cfg: TransformerConfig, batch_size: int, seq_len: int) -> jax.Array:
    """Random tokens [batch_size, seq_len + 1] (inputs and shifted targets)."""
    return jax.random.randint(key, (batch_size, seq_len + 1), 0, cfg.vocab_size, dtype=jnp.int32)
