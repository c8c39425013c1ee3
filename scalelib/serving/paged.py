"""The model step of the engine: many sequences' tokens in one batch, keys and values in blocks.

Book: section 7.4 (paged attention and continuous batching: one step mixes prompt chunks and
generate tokens of different sequences) on top of 7.1's KV cache; ``inference.decode`` is the
plain version with one dense buffer per sequence.

A step takes T tokens laid end to end, whichever sequences they belong to. Token t has a position
``positions[t]`` in its sequence, a row ``rows[t]`` of the block table ``tables`` (that
sequence's block ids in order) and a slot ``slots[t] = block * block_size + offset`` where its key
and value go. Each layer first writes the step's keys and values into the pool, then every token
gathers its own sequence's blocks through the table and attends to slots 0..position (so a prompt
chunk sees itself causally and everything its sequence cached before). Padding tokens carry an
out-of-range slot, so their writes are dropped, and their outputs are never read.

Layers reuse ``decode.project_qkv`` / ``decode.cached_attention`` / ``decode.project_out`` and
``model.mlp_block``, so a step computes what the plain decode computes. Only the rows listed in
``out`` go through the unembedding (the last token of each sequence that picks a new token).

Shapes are bucketed (``bucket``): T, the table width (blocks of the longest sequence) and its
height (sequences in the step, which is also the length of ``out``) each to a power of two
between limits the engine sets, so a run of mixed requests compiles at most the product of the
three numbers of buckets (``engine.EngineConfig.max_programs``), not one program per step.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scalelib import model
from scalelib.inference import decode
from scalelib.serving import sampling
from scalelib.transformer import TransformerConfig


class KVPool(NamedTuple):
    """Keys and values of every layer, in blocks: ``k[l][b, i]`` is the key of slot i of block b."""

    k: tuple  # L arrays [num_blocks, block_size, K, H]
    v: tuple  # L arrays [num_blocks, block_size, K, H]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k + self.v)

    @property
    def bytes_per_block(self) -> int:
        return self.nbytes // self.k[0].shape[0]


def init_pool(cfg: TransformerConfig, num_blocks: int, block_size: int, dtype=jnp.float32) -> KVPool:
    """Zeroed keys and values for ``num_blocks`` blocks of ``block_size`` tokens."""
    shape = (num_blocks, block_size, cfg.n_kv_heads, cfg.head_dim)
    return KVPool(tuple(jnp.zeros(shape, dtype) for _ in range(cfg.n_layers)),
                  tuple(jnp.zeros(shape, dtype) for _ in range(cfg.n_layers)))


class StepInput(NamedTuple):
    """One step's tokens and where they go (host arrays; see the module docstring)."""

    tokens: np.ndarray  # [T] int32
    positions: np.ndarray  # [T] int32
    slots: np.ndarray  # [T] int32; num_blocks * block_size for padding (dropped)
    rows: np.ndarray  # [T] int32: block-table row of the token's sequence
    tables: np.ndarray  # [S, W] int32: block ids of each sequence (0 past its end: masked by position)
    out: np.ndarray  # [R] int32: tokens whose logits are wanted


def unstacked(params: model.Params) -> model.Params:
    """``params`` with one array per layer (``decode.unstack_layers``), as a server keeps them.

    Slicing layer i out of stacked [L, ...] arrays inside a step makes XLA's CPU backend copy every
    weight first (a step of a 25M-parameter model took 30x longer); unstacked weights are read in place.
    """
    return params if isinstance(params["layers"], tuple) else decode.unstack_layers(params)


def bucket(n: int, smallest: int, largest: int) -> int:
    """The power of two >= n (at least ``smallest``), capped at ``largest``."""
    if n > largest:
        raise ValueError(f"{n} does not fit a bucket of at most {largest}")
    return min(largest, max(smallest, 1 << max(n - 1, 0).bit_length()))


def _layer(cfg: TransformerConfig, p: dict, x: jax.Array, k_pool: jax.Array, v_pool: jax.Array, inp: StepInput):
    """Layer on x [1, T, D]: attention through the block table, then the MLP; returns (x, k_pool, v_pool)."""
    num_blocks, block_size, kh, h = k_pool.shape
    q, k, v = decode.project_qkv(cfg, p, x, inp.positions)  # [1, T, N, H], [1, T, K, H] x 2
    flat = (num_blocks * block_size, kh, h)
    k_pool = k_pool.reshape(flat).at[inp.slots].set(k[0].astype(k_pool.dtype), mode="drop").reshape(k_pool.shape)
    v_pool = v_pool.reshape(flat).at[inp.slots].set(v[0].astype(v_pool.dtype), mode="drop").reshape(v_pool.shape)
    blocks = inp.tables[inp.rows]  # [T, W]: each token's sequence's blocks
    t, w = blocks.shape
    k_seq = k_pool[blocks].reshape(t, w * block_size, kh, h).transpose(0, 2, 1, 3)  # [T, K, W bs, H]
    v_seq = v_pool[blocks].reshape(t, w * block_size, kh, h).transpose(0, 2, 1, 3)  # [T, K, W bs, H]
    att = decode.cached_attention(q[0][:, None], k_seq, v_seq, inp.positions[:, None])  # [T, 1, N, H]
    x = x + decode.project_out(cfg, p, att.reshape(1, t, *att.shape[2:]))  # [1, T, D]
    x = x + model.mlp_block(cfg, p, x)  # [1, T, D]
    return x, k_pool, v_pool


def forward(params: model.Params, kv: KVPool, inp: StepInput, cfg: TransformerConfig):
    """One step: (logits [R, V] float32 of the ``out`` tokens, the pool with this step's keys and values)."""
    x = params["embed"][inp.tokens][None]  # [1, T, D]
    ks, vs = list(kv.k), list(kv.v)
    for i in range(cfg.n_layers):  # unrolled, as in decode.extend
        x, ks[i], vs[i] = _layer(cfg, decode.layer_params(params, i), x, ks[i], vs[i], inp)
    x = x[0, inp.out]  # [R, D]
    if cfg.final_norm:
        x = model.norm(x, params["final_norm"], params.get("final_norm_bias"), cfg.norm_eps)  # [R, D]
    w_out = params["embed"].T if cfg.tied_embeddings else params["unembed"]  # [D, V]
    return (x @ w_out).astype(jnp.float32), KVPool(tuple(ks), tuple(vs))  # [R, V]


def forward_and_sample(params: model.Params, kv: KVPool, inp: StepInput, rp: sampling.RowParams,
                       cfg: TransformerConfig):
    """``forward`` then ``sampling.sample`` in one program: (tokens [R] int32, pool)."""
    logits, kv = forward(params, kv, inp, cfg)  # [R, V]
    return sampling.sample(logits, rp), kv


# The pool is donated: its update happens in place instead of copying every layer's blocks.
forward_jit = jax.jit(forward, static_argnums=3, donate_argnums=1)
step_jit = jax.jit(forward_and_sample, static_argnums=4, donate_argnums=1)
