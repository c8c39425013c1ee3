"""Blockwise ("flash") attention in plain JAX: the online-softmax recurrence, forward and backward.

Book: "How to Scale Your Model", section 4.7.1 (Appendix A: how Flash Attention works). Keys and
values are visited one block at a time; each query block keeps a running max ``m``, a running
softmax denominator ``l`` and an unnormalized output ``acc``, so the [T, S] score matrix is
never materialized. The backward pass (``jax.custom_vjp``) saves only q, k, v, the output and
the per-row logsumexp, recomputes each probability block from them, and uses the identity
sum_j P_ij dP_ij = sum_d dO_id O_id to keep every step local to a block.

Layouts: q [B, T, N, H], k and v [B, S, K, H] with N a multiple of K (GQA; K = N is MHA, K = 1
is MQA). Causal masking aligns the last query with the last key (query i sees keys
j <= i + S - T), which covers both training (T = S) and decoding a suffix.
This is a reference implementation for learning and testing, not a fused kernel.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

_HI = jax.lax.Precision.HIGHEST


class SoftmaxState(NamedTuple):
    """Running statistics of one query block (rows r, head dim h)."""

    m: jax.Array  # [..., r] running max of the scores seen so far (-inf before any)
    l: jax.Array  # [..., r] running sum of exp(score - m)  # noqa: E741  (the paper's letter)
    acc: jax.Array  # [..., r, h] running sum of exp(score - m) * v (not yet divided by l)


def init_softmax_state(rows_shape: tuple[int, ...], head_dim: int, dtype: Any = jnp.float32) -> SoftmaxState:
    """Empty state for query rows of shape ``rows_shape``."""
    return SoftmaxState(m=jnp.full(rows_shape, -jnp.inf, dtype),  # [..., r]
                        l=jnp.zeros(rows_shape, dtype),  # [..., r]
                        acc=jnp.zeros((*rows_shape, head_dim), dtype))  # [..., r, h]


def online_softmax_update(state: SoftmaxState, scores: jax.Array, v_block: jax.Array) -> SoftmaxState:
    """Fold one block of keys into the running softmax (Appendix A's recurrence).

    scores: [..., r, c] (masked entries = -inf), v_block: [..., c, h]. The new max is
    m' = max(m, rowmax(scores)); old sums are rescaled by exp(m - m') and the block adds
    exp(scores - m'). Rows that have seen only masked keys keep m = -inf and l = 0.
    """
    m_new = jnp.maximum(state.m, scores.max(axis=-1))  # [..., r]
    m_safe = jnp.where(jnp.isneginf(m_new), 0.0, m_new)  # [..., r] avoids (-inf) - (-inf)
    scale_old = jnp.exp(state.m - m_safe)  # [..., r]
    p = jnp.exp(scores - m_safe[..., None])  # [..., r, c]
    l_new = scale_old * state.l + p.sum(axis=-1)  # [..., r]
    pv = jnp.einsum("...rc,...ch->...rh", p, v_block, precision=_HI)  # [..., r, h]
    acc_new = scale_old[..., None] * state.acc + pv  # [..., r, h]
    return SoftmaxState(m=m_new, l=l_new, acc=acc_new)


def finalize_softmax_state(state: SoftmaxState) -> tuple[jax.Array, jax.Array]:
    """(output [..., r, h], logsumexp [..., r]) from a finished state; empty rows give 0 and -inf."""
    l_safe = jnp.where(state.l == 0, 1.0, state.l)  # [..., r]
    out = state.acc / l_safe[..., None]  # [..., r, h]
    lse = jnp.where(state.l == 0, -jnp.inf, state.m + jnp.log(l_safe))  # [..., r]
    return out, lse


def reference_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = True,
                        scale: float | None = None) -> jax.Array:
    """Naive attention that materializes all scores: q [B,T,N,H], k/v [B,S,K,H] -> [B,T,N,H]."""
    _check_shapes(q, k, v, causal)
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    scale = h ** -0.5 if scale is None else scale
    qg = q.reshape(b, t, kh, n // kh, h)  # [B, T, K, G, H]
    scores = jnp.einsum("btkgh,bskh->bkgts", qg, k, precision=_HI) * scale  # [B, K, G, T, S]
    if causal:
        scores = jnp.where(_causal_mask(jnp.arange(t), jnp.arange(s), t, s), scores, -jnp.inf)  # [B, K, G, T, S]
    probs = jax.nn.softmax(scores, axis=-1)  # [B, K, G, T, S]
    out = jnp.einsum("bkgts,bskh->btkgh", probs, v, precision=_HI)  # [B, T, K, G, H]
    return out.reshape(b, t, n, h)  # [B, T, N, H]


def _causal_mask(q_pos: jax.Array, k_pos: jax.Array, t: int, s: int) -> jax.Array:
    return k_pos[None, :] <= q_pos[:, None] + (s - t)  # [r, c]


def _check_shapes(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False) -> None:
    if causal and q.shape[1] > k.shape[1]:
        raise ValueError(f"causal attention with more queries (T={q.shape[1]}) than keys (S={k.shape[1]}) "
                         "leaves the first queries no key to see; pass T <= S or causal=False")
    if q.ndim != 4 or k.ndim != 4 or k.shape != v.shape:
        raise ValueError(f"expected q [B,T,N,H] and k, v [B,S,K,H] of equal shape; got q {q.shape}, "
                         f"k {k.shape}, v {v.shape}")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(f"q and k must share batch and head_dim, got q {q.shape} and k {k.shape}")
    if q.shape[2] % k.shape[2]:
        raise ValueError(f"query heads N={q.shape[2]} are not a multiple of KV heads K={k.shape[2]}; "
                         "GQA needs K to divide N")


def _to_blocks(x: jax.Array, block: int, name: str) -> jax.Array:
    """[B, L, K, ...] -> [L/block, B, K, ..., block, H] (block-major, heads before rows)."""
    b, length = x.shape[:2]
    if length % block:
        raise ValueError(f"{name} length {length} is not a multiple of its block size {block}; "
                         f"pick a block size that divides {length}")
    x = x.reshape(b, length // block, block, *x.shape[2:])  # [B, nb, blk, K, (G,) H]
    return jnp.moveaxis(jnp.moveaxis(x, 1, 0), 2, -2)  # [nb, B, K, (G,) blk, H]


def _from_blocks(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Inverse of ``_to_blocks`` for q-shaped arrays: [nb, B, K, G, blk, H] -> [B, T, N, H]."""
    x = jnp.moveaxis(jnp.moveaxis(x, -2, 2), 0, 1)  # [B, nb, blk, K, G, H]
    return x.reshape(shape)  # [B, T, N, H]


class _Cfg(NamedTuple):
    causal: bool
    block_q: int
    block_k: int
    scale: float


def _block_scores(cfg: _Cfg, q_blk: jax.Array, k_blk: jax.Array, qi: Any, kj: Any, t: int, s: int) -> jax.Array:
    """Scaled, masked scores of query block qi against key block kj: [B, K, G, bq, bk]."""
    scores = jnp.einsum("bkgrh,bkch->bkgrc", q_blk, k_blk, precision=_HI) * cfg.scale  # [B, K, G, bq, bk]
    if cfg.causal:
        q_pos = qi * cfg.block_q + jnp.arange(cfg.block_q)  # [bq]
        k_pos = kj * cfg.block_k + jnp.arange(cfg.block_k)  # [bk]
        scores = jnp.where(_causal_mask(q_pos, k_pos, t, s), scores, -jnp.inf)  # [B, K, G, bq, bk]
    return scores


def _n_kv_blocks(cfg: _Cfg, qi: Any, t: int, s: int) -> Any:
    """Key blocks query block ``qi`` needs: all of them, or (causal) those up to its last key."""
    n_all = s // cfg.block_k
    if not cfg.causal:
        return n_all
    last_key = qi * cfg.block_q + cfg.block_q - 1 + (s - t)  # may be traced
    return jnp.clip(last_key // cfg.block_k + 1, 0, n_all)


def _forward(cfg: _Cfg, q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    qb = _to_blocks(q.reshape(b, t, kh, n // kh, h), cfg.block_q, "query")  # [nq, B, K, G, bq, H]
    kb = _to_blocks(k, cfg.block_k, "key")  # [nk, B, K, bk, H]
    vb = _to_blocks(v, cfg.block_k, "value")  # [nk, B, K, bk, H]

    def one_query_block(args: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        qi, q_blk = args  # q_blk [B, K, G, bq, H]

        def body(kj: Any, state: SoftmaxState) -> SoftmaxState:
            scores = _block_scores(cfg, q_blk, kb[kj], qi, kj, t, s)  # [B, K, G, bq, bk]
            return online_softmax_update(state, scores, vb[kj][:, :, None])  # v: [B, K, 1, bk, H]

        state = init_softmax_state(q_blk.shape[:-1], h, jnp.float32)
        state = jax.lax.fori_loop(0, _n_kv_blocks(cfg, qi, t, s), body, state)
        return finalize_softmax_state(state)  # ([B, K, G, bq, H], [B, K, G, bq])

    out, lse = jax.lax.map(one_query_block, (jnp.arange(qb.shape[0]), qb))  # [nq, ...]
    return _from_blocks(out, q.shape).astype(q.dtype), lse  # [B, T, N, H], [nq, B, K, G, bq]


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(cfg: _Cfg, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return _forward(cfg, q, k, v)[0]


def _flash_fwd(cfg: _Cfg, q: jax.Array, k: jax.Array, v: jax.Array) -> tuple[jax.Array, tuple]:
    out, lse = _forward(cfg, q, k, v)
    return out, (q, k, v, out, lse)


def _flash_bwd(cfg: _Cfg, res: tuple, d_out: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    q, k, v, out, lse = res
    b, t, n, h = q.shape
    s, kh = k.shape[1], k.shape[2]
    g = n // kh
    qb = _to_blocks(q.reshape(b, t, kh, g, h), cfg.block_q, "query")  # [nq, B, K, G, bq, H]
    dob = _to_blocks(d_out.reshape(b, t, kh, g, h), cfg.block_q, "query")  # [nq, B, K, G, bq, H]
    ob = _to_blocks(out.reshape(b, t, kh, g, h), cfg.block_q, "query")  # [nq, B, K, G, bq, H]
    delta = (dob * ob).sum(-1)  # [nq, B, K, G, bq]  rowsum(dO * O) = sum_j P dP
    lse_safe = jnp.where(jnp.isneginf(lse), 0.0, lse)  # [nq, B, K, G, bq] fully masked rows
    kb = _to_blocks(k, cfg.block_k, "key")  # [nk, B, K, bk, H]
    vb = _to_blocks(v, cfg.block_k, "value")  # [nk, B, K, bk, H]

    def one_key_block(dq: jax.Array, args: tuple) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
        kj, k_blk, v_blk = args  # k_blk, v_blk [B, K, bk, H]

        def one_query_block(carry: tuple, qargs: tuple) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
            dk, dv = carry  # [B, K, bk, H] each
            qi, q_blk, do_blk, lse_blk, delta_blk = qargs
            scores = _block_scores(cfg, q_blk, k_blk, qi, kj, t, s)  # [B, K, G, bq, bk]
            p = jnp.exp(scores - lse_blk[..., None])  # [B, K, G, bq, bk] masked -> 0
            dv = dv + jnp.einsum("bkgrc,bkgrh->bkch", p, do_blk, precision=_HI)  # [B, K, bk, H]
            dp = jnp.einsum("bkgrh,bkch->bkgrc", do_blk, v_blk, precision=_HI)  # [B, K, G, bq, bk]
            ds = p * (dp - delta_blk[..., None]) * cfg.scale  # [B, K, G, bq, bk]
            dk = dk + jnp.einsum("bkgrc,bkgrh->bkch", ds, q_blk, precision=_HI)  # [B, K, bk, H]
            dq_blk = jnp.einsum("bkgrc,bkch->bkgrh", ds, k_blk, precision=_HI)  # [B, K, G, bq, H]
            return (dk, dv), dq_blk

        zeros = jnp.zeros(k_blk.shape, jnp.float32)  # [B, K, bk, H]
        (dk, dv), dq_parts = jax.lax.scan(
            one_query_block, (zeros, zeros), (jnp.arange(qb.shape[0]), qb, dob, lse_safe, delta))
        return dq + dq_parts, (dk, dv)  # dq_parts [nq, B, K, G, bq, H]

    dq0 = jnp.zeros(qb.shape, jnp.float32)  # [nq, B, K, G, bq, H]
    dq, (dk, dv) = jax.lax.scan(one_key_block, dq0, (jnp.arange(kb.shape[0]), kb, vb))  # dk, dv [nk, B, K, bk, H]
    dq = _from_blocks(dq, q.shape)  # [B, T, N, H]
    dk = _from_blocks(dk[:, :, :, None], (b, s, kh, h))  # [B, S, K, H]
    dv = _from_blocks(dv[:, :, :, None], (b, s, kh, h))  # [B, S, K, H]
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)


_flash.defvjp(_flash_fwd, _flash_bwd)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = True, *, block_q: int = 128,
                    block_k: int = 128, scale: float | None = None) -> jax.Array:
    """Attention of q [B, T, N, H] over k, v [B, S, K, H], one key block at a time -> [B, T, N, H].

    Same result as ``reference_attention`` (up to float rounding). Block sizes larger than the
    sequence are shrunk to it; otherwise they must divide T (``block_q``) and S (``block_k``).
    The backward pass recomputes the probabilities from the saved logsumexp (custom_vjp).
    Causal: masked key blocks are skipped in the forward; the backward visits every pair of
    blocks (simpler, same result).
    """
    _check_shapes(q, k, v, causal)
    t, s, h = q.shape[1], k.shape[1], q.shape[3]
    cfg = _Cfg(causal=bool(causal), block_q=min(block_q, t), block_k=min(block_k, s),
               scale=float(h ** -0.5 if scale is None else scale))
    return _flash(cfg, q, k, v)
