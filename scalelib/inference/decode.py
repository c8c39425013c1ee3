"""Prefill and greedy generation on ``scalelib.model`` with a KV cache.

Book: section 7.1 (inference is two jobs: prefill runs the whole prompt in one pass and keeps
every layer's keys and values; generation then feeds one token per step, attends to what was
kept and appends its own keys and values) and 7.4.3 (an engine's prefill / generate interface).

The cache holds, per layer, ``k`` and ``v`` buffers of shape [B, K, S_max, H] and the number of
positions filled. A call that adds T tokens writes their keys and values at positions
``length .. length + T - 1``; the query at position p sees slots 0..p and the empty slots
beyond are masked out. Each step therefore multiplies the whole buffer, as a dense kernel
without ragged reads would (``step_time.decode_step_cost`` counts it that way). All sequences
of a batch share one length: no padding, no paging.

Layers reuse ``model.norm``, ``model.rope`` and ``model.mlp_block`` (MoE included), so a cached
decode computes what ``model.forward`` computes on the whole sequence; the tests hold the
logits to it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scalelib import model
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int

_HI = jax.lax.Precision.HIGHEST


class KVCache(NamedTuple):
    """Keys and values of every layer for positions 0 .. length - 1 (later slots unused)."""

    k: tuple  # L arrays [B, K, S_max, H]
    v: tuple  # L arrays [B, K, S_max, H]
    length: jax.Array  # [] int32

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]


def init_cache(cfg: TransformerConfig, batch: int, max_len: int, dtype: Any = jnp.float32) -> KVCache:
    """An empty cache for ``batch`` sequences of up to ``max_len`` tokens."""
    batch, max_len = positive_int("batch", batch), positive_int("max_len", max_len)
    shape = (batch, cfg.n_kv_heads, max_len, cfg.head_dim)
    k = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.n_layers))
    v = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.n_layers))  # separate buffers: each can be donated
    return KVCache(k, v, jnp.zeros((), jnp.int32))


def cached_attention(q: jax.Array, k: jax.Array, v: jax.Array, q_pos: jax.Array | np.ndarray) -> jax.Array:
    """q [B, T, N, H] at positions q_pos [T] against a cache k, v [B, K, S, H] -> [B, T, N, H].

    Slot j is visible to the query at position p when j <= p (causal, empty slots excluded).
    ``q_pos`` may also be [B, T], one row of positions per sequence (a paged step mixes sequences
    of different lengths in one batch).
    """
    b, t, n, h = q.shape
    kh, s = k.shape[1], k.shape[2]
    qg = q.reshape(b, t, kh, n // kh, h)  # [B, T, K, G, H]
    scores = jnp.einsum("btkgh,bksh->bkgts", qg, k, precision=_HI) * h ** -0.5  # [B, K, G, T, S]
    visible = jnp.arange(s) <= q_pos[..., None]  # [T, S] or [B, T, S]
    if visible.ndim == 3:
        visible = visible[:, None, None]  # [B, 1, 1, T, S]
    scores = jnp.where(visible, scores, -jnp.inf)  # [B, K, G, T, S]
    probs = jax.nn.softmax(scores, axis=-1)  # [B, K, G, T, S]
    out = jnp.einsum("bkgts,bksh->btkgh", probs, v, precision=_HI)  # [B, T, K, G, H]
    return out.reshape(b, t, n, h)  # [B, T, N, H]


def project_qkv(cfg: TransformerConfig, p: dict, x: jax.Array,
                positions: jax.Array | np.ndarray) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Queries [B, T, N, H], keys and values [B, T, K, H] of x [B, T, D] at ``positions`` [T] (RoPE applied)."""
    y = model.norm(x, p["attn_norm"], p.get("attn_norm_bias"), cfg.norm_eps)  # [B, T, D]
    q = jnp.einsum("btd,dnh->btnh", y, p["wq"])  # [B, T, N, H]
    k = jnp.einsum("btd,dkh->btkh", y, p["wk"])  # [B, T, K, H]
    v = jnp.einsum("btd,dkh->btkh", y, p["wv"])  # [B, T, K, H]
    if cfg.qkv_bias:
        q, k, v = q + p["bq"], k + p["bk"], v + p["bv"]  # biases broadcast over [B, T]
    pos = jnp.asarray(positions)  # [T]
    q, k = model.rope(q, pos, cfg.rope_theta), model.rope(k, pos, cfg.rope_theta)  # [B, T, N|K, H]
    return q, k, v


def project_out(cfg: TransformerConfig, p: dict, att: jax.Array) -> jax.Array:
    """Attention output att [B, T, N, H] through W_O (and its bias) -> [B, T, D]."""
    b, t, n, h = att.shape
    out = att.reshape(b, t, n * h) @ p["wo"].reshape(n * h, -1)  # [B, T, D]: W_O as one [N H, D] matrix
    return out + p["bo"] if cfg.o_bias else out


def _attention_with_cache(cfg: TransformerConfig, p: dict, x: jax.Array, cache: KVCache,
                          layer: int) -> tuple[jax.Array, KVCache]:
    """Residual branch of layer ``layer``'s attention for x [B, T, D]; writes its keys and values."""
    positions = cache.length + jnp.arange(x.shape[1])  # [T]
    q, k, v = project_qkv(cfg, p, x, positions)  # [B, T, N|K, H]
    at = (0, 0, cache.length, 0)
    k_new = k.transpose(0, 2, 1, 3).astype(cache.k[layer].dtype)  # [B, K, T, H]
    v_new = v.transpose(0, 2, 1, 3).astype(cache.v[layer].dtype)  # [B, K, T, H]
    k_l = jax.lax.dynamic_update_slice(cache.k[layer], k_new, at)  # [B, K, S_max, H]
    v_l = jax.lax.dynamic_update_slice(cache.v[layer], v_new, at)  # [B, K, S_max, H]
    out = project_out(cfg, p, cached_attention(q, k_l, v_l, positions))  # [B, T, D]
    put = lambda arrays, new: arrays[:layer] + (new,) + arrays[layer + 1:]  # noqa: E731
    return out, cache._replace(k=put(cache.k, k_l), v=put(cache.v, v_l))


def unstack_layers(params: model.Params) -> model.Params:
    """``params`` with its [L, ...] layer arrays split into a tuple of L per-layer dicts.

    A server keeps each layer's weights as separate arrays so a step reads them where they lie;
    slicing a stacked array inside the step makes XLA's CPU backend copy every weight first.
    ``extend`` accepts either form.
    """
    return {**params, "layers": tuple(layer_params(params, i) for i in range(len(params["layers"]["wq"])))}


def layer_params(params: model.Params, i: int) -> dict:
    """Layer i's weights from stacked [L, ...] arrays or from ``unstack_layers``' tuple."""
    layers = params["layers"]
    return layers[i] if isinstance(layers, tuple) else jax.tree.map(lambda a: a[i], layers)


def extend(params: model.Params, tokens: jax.Array, cache: KVCache,
           cfg: TransformerConfig) -> tuple[jax.Array, KVCache]:
    """Run tokens [B, T] after the cached positions: (logits [B, T, V] float32, updated cache).

    Prefill is ``extend`` on an empty cache; a generate step is ``extend`` with T = 1. The
    caller keeps length + T <= max_len (positions past the buffer would be dropped).
    """
    if tokens.ndim != 2 or tokens.shape[0] != cache.k[0].shape[0]:
        raise ValueError(f"tokens must be [B, T] with B = the cache's batch {cache.k[0].shape[0]}, got {tokens.shape}")
    x = params["embed"][tokens]  # [B, T, D]
    for i in range(cfg.n_layers):  # unrolled: XLA's cost analysis counts a loop body once
        p = layer_params(params, i)
        out, cache = _attention_with_cache(cfg, p, x, cache, i)
        x = x + out  # [B, T, D]
        x = x + model.mlp_block(cfg, p, x)  # [B, T, D]
    if cfg.final_norm:
        x = model.norm(x, params["final_norm"], params.get("final_norm_bias"), cfg.norm_eps)  # [B, T, D]
    w_out = params["embed"].T if cfg.tied_embeddings else params["unembed"]  # [D, V]
    logits = (x @ w_out).astype(jnp.float32)  # [B, T, V]
    return logits, cache._replace(length=cache.length + tokens.shape[1])


def prefill(params: model.Params, prompt: jax.Array, cfg: TransformerConfig,
            max_len: int) -> tuple[jax.Array, KVCache]:
    """Process prompt [B, T0] at once: (logits [B, T0, V], cache holding T0 positions)."""
    if prompt.shape[1] > max_len:
        raise ValueError(f"prompt of {prompt.shape[1]} tokens does not fit a cache of max_len={max_len}; "
                         "raise max_len to at least the prompt plus the tokens to generate")
    cache = init_cache(cfg, prompt.shape[0], max_len, params["embed"].dtype)
    return extend(params, prompt, cache, cfg)


def decode_step(params: model.Params, token: jax.Array, cache: KVCache,
                cfg: TransformerConfig) -> tuple[jax.Array, KVCache]:
    """One generate step for token [B]: (next-token logits [B, V], cache one position longer)."""
    logits, cache = extend(params, token[:, None], cache, cfg)  # [B, 1, V]
    return logits[:, 0], cache


def generate(params: model.Params, prompt: jax.Array, cfg: TransformerConfig, steps: int,
             max_len: int | None = None) -> tuple[jax.Array, jax.Array]:
    """Greedy generation of ``steps`` tokens after prompt [B, T0].

    Returns (tokens [B, steps], logits [B, steps, V]): logits[:, i] is the distribution that
    tokens[:, i] was taken from (its argmax). Generation runs under ``lax.scan``, one step a
    token; the cache needs T0 + steps positions.
    """
    steps = positive_int("steps", steps)
    max_len = prompt.shape[1] + steps if max_len is None else max_len
    if max_len < prompt.shape[1] + steps:
        raise ValueError(f"max_len={max_len} cannot hold the {prompt.shape[1]}-token prompt plus {steps} new "
                         f"tokens; use max_len >= {prompt.shape[1] + steps}")
    logits, cache = prefill(params, prompt, cfg, max_len)

    def step(carry: tuple[jax.Array, KVCache], _: Any) -> tuple[tuple[jax.Array, KVCache], tuple[jax.Array, jax.Array]]:
        last, cache = carry  # last: [B, V]
        token = jnp.argmax(last, axis=-1)  # [B]
        nxt, cache = decode_step(params, token, cache, cfg)  # [B, V]
        return (nxt, cache), (token, last)

    _, (tokens, all_logits) = jax.lax.scan(step, (logits[:, -1], cache), None, length=steps)
    return tokens.T, jnp.moveaxis(all_logits, 0, 1)  # [B, steps], [B, steps, V]
