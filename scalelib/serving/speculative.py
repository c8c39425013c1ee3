"""Speculative decoding: a small draft model proposes k tokens, the target checks them in one step.

Book: section 7.4 (speculative sampling: a generate step is bound by loading the weights, so the
target scoring k + 1 tokens costs about what scoring one does; every draft token it accepts is a
step saved). The acceptance rule keeps the target's distribution exactly:

* draft token d, proposed with probability q(d), is accepted with probability min(1, p(d) / q(d)),
  where p is the target's distribution at that position;
* at the first rejection the token is drawn instead from the residual max(p - q, 0), normalized,
  and the round ends;
* when all k are accepted, the target's distribution after the last one gives a bonus token.

So P(emit x) = min(p(x), q(x)) + (1 - sum_y min(p(y), q(y))) residual(x) = p(x). Greedy requests
are the special case where p and q are one-hot (``sampling.probabilities``): a draft token is
accepted exactly when it is the target's argmax, and a rejection emits the argmax, so greedy
speculative decoding returns the target's greedy tokens.

If each draft token is accepted with probability a, independently, a round emits
(1 - a^(k+1)) / (1 - a) tokens on average (``expected_tokens_per_round``); ``SpecStats`` holds
the measured figure next to it.

``generate`` serves one sequence with the dense caches of ``inference.decode`` (rejected tokens
are dropped by moving the cache's length back); it is not fused with the batching engine.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from scalelib import model
from scalelib.inference import decode
from scalelib.serving import paged, sampling
from scalelib.serving.request import Request
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int

DRAFT, ACCEPT, RESAMPLE = 1, 2, 3  # key streams (sampling.token_keys) of the three kinds of draw


def acceptance_probability(p: jax.Array, q: jax.Array) -> jax.Array:
    """min(1, p / q) per token [..., V] (1 where q = 0: such a token is never proposed)."""
    return jnp.where(q > 0, jnp.minimum(1.0, p / jnp.where(q > 0, q, 1.0)), 1.0)


def residual(p: jax.Array, q: jax.Array) -> jax.Array:
    """max(p - q, 0) normalized over the last axis (p itself where p <= q everywhere, i.e. p == q)."""
    r = jnp.maximum(p - q, 0.0)  # [..., V]
    total = r.sum(-1, keepdims=True)  # [..., 1]
    return jnp.where(total > 0, r / jnp.where(total > 0, total, 1.0), p)


def inverse_cdf(probs: jax.Array, u: jax.Array) -> jax.Array:
    """The token whose interval of the cumulative distribution holds u in [0, 1)."""
    cdf = jnp.cumsum(probs, axis=-1)  # [V]
    return jnp.minimum(jnp.sum(cdf <= u * cdf[-1]), probs.shape[-1] - 1).astype(jnp.int32)


def verify(p: jax.Array, q: jax.Array, draft: jax.Array, u: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The acceptance rule: (accepted count n, next token).

    p [k + 1, V]: the target's distributions at the k draft positions and the one after;
    q [k, V]: the draft's; draft [k]: its tokens; u [k]: uniform draws in [0, 1), draft token i is
    accepted while u[i] < min(1, p_i / q_i); v []: a uniform draw that picks the next token (by
    inverse CDF) from the residual at the first rejection, or from p[k] when all k are accepted.
    """
    k = draft.shape[0]
    a = acceptance_probability(p[:k], q)[jnp.arange(k), draft]  # [k]
    n = jnp.sum(jnp.cumprod(u < a)).astype(jnp.int32)  # accepted before the first rejection
    at = jnp.minimum(n, k - 1)
    dist = jnp.where(n < k, residual(p[at], q[at]), p[k])  # [V]
    return n, inverse_cdf(dist, v)


Cell = tuple[tuple[int, ...], list[float], float, float, tuple[int, ...]]


def round_cells(p: np.ndarray, q: np.ndarray) -> list[Cell]:
    """Every outcome of one round as (draft, u, v, probability, emitted tokens), for exact checks.

    p [k + 1, V] and q [k, V] as in ``verify``; the draft tokens are drawn from the rows of q. The
    uniform draws u and v split into cells on which the rule's result is constant: draft token i
    is accepted or not as u[i] falls below or above its acceptance probability, and v falls in one
    token's interval of the distribution the extra token comes from. Each cell is given by the
    draws at its middle, its probability, and the tokens the rule should emit there. Summing the
    probabilities of the tokens a rule really emits at those draws gives its exact distribution.
    """
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    k, v_size = q.shape
    a = np.where(q > 0, np.minimum(1.0, p[:k] / np.where(q > 0, q, 1.0)), 1.0)  # [k, V], in float64 here
    r = np.maximum(p[:k] - q, 0.0)  # [k, V], normalized below
    r = np.where(r.sum(-1, keepdims=True) > 0, r, p[:k])
    out = []
    for draft in itertools.product(range(v_size), repeat=k):
        p_draft = math.prod(q[i, d] for i, d in enumerate(draft))
        acc = [a[i, d] for i, d in enumerate(draft)]
        for n in range(k + 1):
            p_n = math.prod(acc[:n]) * (1 - acc[n] if n < k else 1.0)
            if p_draft * p_n == 0:
                continue
            u = [x / 2 for x in acc[:n]] + ([(1 + acc[n]) / 2] if n < k else []) + [0.5] * (k - n - 1)
            dist = r[n] if n < k else p[k]
            cdf = np.cumsum(dist) / dist.sum()
            for x in np.flatnonzero(dist > 0):
                out.append((draft, u, float(cdf[x] - dist[x] / dist.sum() / 2), p_draft * p_n * dist[x] / dist.sum(),
                            draft[:n] + (int(x),)))
    return out


def expected_tokens_per_round(acceptance: float, k: int) -> float:
    """Tokens a round emits on average when each draft token is accepted with probability ``acceptance``."""
    if not 0 <= acceptance <= 1:
        raise ValueError(f"acceptance must be a probability, got {acceptance!r}")
    return float(k + 1) if acceptance == 1 else (1 - acceptance ** (k + 1)) / (1 - acceptance)


@dataclass(frozen=True)
class SpecStats:
    """Counts of one speculative run: rounds (target steps), draft tokens proposed and accepted, tokens emitted."""

    k: int
    rounds: int
    drafted: int
    accepted: int
    emitted: int

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    @property
    def expected_tokens_per_round(self) -> float:
        return expected_tokens_per_round(self.acceptance_rate, self.k)


def early_exit_draft(params: model.Params, cfg: TransformerConfig,
                     layers: int) -> tuple[model.Params, TransformerConfig]:
    """The first ``layers`` layers of a model (with its embedding, final norm and unembedding) as its draft.

    Self-speculation: the draft shares the target's weights and costs about layers / L of a step.
    ``params`` has stacked [L, ...] layer arrays (``model.init``'s form).
    """
    if not positive_int("layers", layers) < cfg.n_layers:
        raise ValueError(f"layers must be an int in [1, {cfg.n_layers}), got {layers!r}")
    return ({**params, "layers": jax.tree.map(lambda a: a[:layers], params["layers"])},
            cfg.replace(n_layers=layers, name=f"{cfg.name}-first-{layers}"))


def scale_upper_layers(params: model.Params, start: int, factor: float) -> model.Params:
    """``params`` with the residual branches (W_O, W_down) of layers ``start``.. scaled by ``factor``.

    A random model's first layers predict nothing of its output, so a draft made of them is always
    rejected; a trained model's early layers already predict much of it. Damping the upper layers
    of a random model stands in for that, so speculation can be shown without training a model.
    """
    layers = dict(params["layers"])
    for name in ("wo", "w_down", "shared_w_down"):
        if name in layers:
            layers[name] = layers[name].at[start:].multiply(factor)
    return {**params, "layers": layers}


def _uniform(keys: jax.Array) -> jax.Array:
    return jax.vmap(lambda key: jax.random.uniform(key, ()))(keys)


@partial(jax.jit, static_argnums=(6, 7, 8, 9), donate_argnums=(2, 3))
def _round(t_params: model.Params, d_params: model.Params, t_cache: decode.KVCache, d_cache: decode.KVCache,
           pending: jax.Array, rp: sampling.RowParams, t_cfg: TransformerConfig, d_cfg: TransformerConfig,
           k: int, greedy: bool) -> tuple[jax.Array, jax.Array, jax.Array, decode.KVCache, decode.KVCache]:
    """Draft k tokens after ``pending`` [1, P] (the target's pending token last), then verify them.

    Returns (draft [k], accepted n, next token, target cache, draft cache); the caller moves the
    caches' lengths back past what was rejected. ``greedy`` skips the sampling filters (one-hot
    distributions at the argmax: what ``sampling.probabilities`` gives a greedy row).
    """
    def dist(logits: jax.Array, row: sampling.RowParams) -> jax.Array:  # [R, V] -> [R, V]
        if greedy:
            return jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)
        return sampling.probabilities(logits, row)

    start = t_cache.length + 1  # position of the first draft token
    positions = start + jnp.arange(k + 1)  # [k + 1]
    wide = lambda f: jnp.broadcast_to(f, (k + 1,))  # noqa: E731  # [k + 1]
    rows = sampling.RowParams(wide(rp.temperature), wide(rp.top_k), wide(rp.top_p), wide(rp.seed), positions)
    u_draft = _uniform(sampling.token_keys(rows.seed, positions, DRAFT))  # [k + 1]

    def propose(d_cache: decode.KVCache, feed: jax.Array,
                i: jax.Array | int) -> tuple[decode.KVCache, jax.Array, jax.Array]:
        """Feed the draft, pick its next token: (cache, token, its distribution [V])."""
        logits, d_cache = decode.extend(d_params, feed, d_cache, d_cfg)  # [1, P or 1, V]
        q = dist(logits[:, -1], sampling.RowParams(*(f[i][None] for f in rows)))[0]  # [V]
        return d_cache, inverse_cdf(q, u_draft[i]), q

    d_cache, first, q0 = propose(d_cache, pending, 0)  # the pending tokens (1 or 2) give draft token 1

    Carry = tuple[decode.KVCache, jax.Array]

    # draft tokens 2..k, one at a time: one compiled body whatever k is
    def step(carry: Carry, i: jax.Array) -> tuple[Carry, tuple[jax.Array, jax.Array]]:
        d_cache, tok = carry
        d_cache, nxt, q = propose(d_cache, tok.reshape(1, 1), i)
        return (d_cache, nxt), (nxt, q)

    (d_cache, _), (rest, q_rest) = jax.lax.scan(step, (d_cache, first), jnp.arange(1, k))
    draft = jnp.concatenate([first[None], rest])  # [k]
    qs = jnp.concatenate([q0[None], q_rest])  # [k, V]
    tokens = jnp.concatenate([pending[:, -1:], draft[None]], axis=1)  # [1, k + 1]
    logits, t_cache = decode.extend(t_params, tokens, t_cache, t_cfg)  # [1, k + 1, V]
    p = dist(logits[0], rows)  # [k + 1, V]
    u = _uniform(sampling.token_keys(rows.seed[:k], positions[:k], ACCEPT))  # [k]
    v = _uniform(sampling.token_keys(rows.seed[:1], positions[:1], RESAMPLE))[0]  # one per round
    n, nxt = verify(p, qs, draft, u, v)
    return draft, n, nxt, t_cache, d_cache


def generate(target: tuple[model.Params, TransformerConfig], draft: tuple[model.Params, TransformerConfig],
             req: Request, k: int) -> tuple[list[int], SpecStats]:
    """Serve ``req`` alone with ``k`` draft tokens per round: (new tokens, statistics)."""
    (t_params, t_cfg), (d_params, d_cfg) = target, draft
    t_params, d_params = paged.unstacked(t_params), paged.unstacked(d_params)
    k = positive_int("k (draft tokens per round)", k)
    if t_cfg.vocab_size != d_cfg.vocab_size:
        raise ValueError(f"draft and target must share a vocabulary, got {d_cfg.vocab_size} and {t_cfg.vocab_size}")
    bad = [t for t in req.prompt if t >= t_cfg.vocab_size]
    if bad:
        raise ValueError(f"token id {bad[0]} is outside the vocabulary of {t_cfg.vocab_size} tokens")
    max_len = len(req.prompt) + req.max_tokens + k + 1
    t_cache = decode.init_cache(t_cfg, 1, max_len, t_params["embed"].dtype)
    d_cache = decode.init_cache(d_cfg, 1, max_len, d_params["embed"].dtype)
    if len(req.prompt) > 1:  # both caches hold the prompt but its last token
        prompt = jnp.asarray([req.prompt[:-1]], jnp.int32)
        t_cache, d_cache = _extend(t_params, prompt, t_cache, t_cfg), _extend(d_params, prompt, d_cache, d_cfg)
    rp = sampling.row_params([req.sampling], [0], 1)
    tokens: list[int] = list(req.prompt)
    out: list[int] = []
    rounds = drafted = accepted = 0
    while len(out) < req.max_tokens:
        # Every round the target feeds the newest token and the draft the newest two: the draft's cache then
        # always ends two tokens back, whether or not its last proposal was accepted (one compiled round).
        pending = tokens[-2:]
        d_cache = d_cache._replace(length=jnp.int32(len(tokens) - len(pending)))
        proposed, n_acc, nxt, t_cache, d_cache = _round(t_params, d_params, t_cache, d_cache,
                                                        jnp.asarray([pending], jnp.int32), rp, t_cfg, d_cfg, k,
                                                        req.sampling.greedy)
        n, drafts = int(n_acc), np.asarray(proposed).tolist()
        rounds, drafted, accepted = rounds + 1, drafted + k, accepted + n
        for tok in drafts[:n] + [int(nxt)]:
            tokens.append(tok)
            out.append(tok)
            if tok in req.stop or len(out) == req.max_tokens:
                return out, SpecStats(k, rounds, drafted, accepted, len(out))
        t_cache = t_cache._replace(length=jnp.int32(len(tokens) - 1))  # drop what was rejected
    return out, SpecStats(k, rounds, drafted, accepted, len(out))


_extend = jax.jit(lambda params, tokens, cache, cfg: decode.extend(params, tokens, cache, cfg)[1], static_argnums=3)
