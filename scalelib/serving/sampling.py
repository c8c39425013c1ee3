"""Picking each new token from the logits, reproducibly per request.

Book: section 7.1 (generation picks a token from the model's distribution and feeds it back).

Every row of a step's logits belongs to one request. Its token comes from:

* greedy (temperature 0): the argmax;
* otherwise: the logits divided by the temperature, cut to the ``top_k`` largest (0: no cut),
  then to the smallest set of most likely tokens whose probability reaches ``top_p`` (1: no
  cut), and sampled. Tokens tied with the last one kept are kept too.

The random key of a row is ``fold_in(key(seed), position)``: the request's seed and the position
of the token being chosen, never the row's place in the batch. A request therefore draws the
same tokens alone, batched with others, chunked differently or recomputed after preemption.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scalelib.serving.request import SamplingParams


class RowParams(NamedTuple):
    """Sampling parameters of R rows, as arrays the jitted step takes."""

    temperature: jax.Array  # [R] float32, 0 = greedy
    top_k: jax.Array  # [R] int32, 0 = all tokens
    top_p: jax.Array  # [R] float32
    seed: jax.Array  # [R] int32
    position: jax.Array  # [R] int32: the position of the token each row picks


def row_params(params: Sequence[SamplingParams], positions: Sequence[int], rows: int) -> RowParams:
    """Pack per-request ``params`` and token ``positions`` into ``rows`` rows (padding rows are greedy)."""
    n = len(params)
    if n > rows or len(positions) != n:
        raise ValueError(f"{n} requests and {len(positions)} positions do not fit {rows} rows")
    pad = rows - n
    return RowParams(
        temperature=np.array([p.temperature for p in params] + [0.0] * pad, np.float32),
        top_k=np.array([p.top_k for p in params] + [0] * pad, np.int32),
        top_p=np.array([p.top_p for p in params] + [1.0] * pad, np.float32),
        seed=np.array([p.seed for p in params] + [0] * pad, np.int32),
        position=np.array(list(positions) + [0] * pad, np.int32))


def token_keys(seed: jax.Array, position: jax.Array, stream: int = 0) -> jax.Array:
    """One PRNG key per row from its seed and token position; ``stream`` separates independent draws."""
    one = lambda s, p: jax.random.fold_in(jax.random.fold_in(jax.random.key(s), p), stream)
    return jax.vmap(one)(seed, position)  # [R] keys


def filtered_logits(logits: jax.Array, rp: RowParams) -> jax.Array:
    """logits [R, V] scaled by temperature, with tokens outside top-k / top-p set to -inf (greedy rows: unscaled)."""
    v = logits.shape[-1]
    temp = jnp.where(rp.temperature > 0, rp.temperature, 1.0)[:, None]  # [R, 1]
    scaled = logits.astype(jnp.float32) / temp  # [R, V]
    ordered = jnp.sort(scaled, axis=-1)[:, ::-1]  # [R, V], largest first
    k = jnp.where(rp.top_k > 0, jnp.minimum(rp.top_k, v), v)  # [R]
    kth = jnp.take_along_axis(ordered, (k - 1)[:, None], axis=-1)  # [R, 1]
    ordered = jnp.where(jnp.arange(v) < k[:, None], ordered, -jnp.inf)  # [R, V] top-k, still sorted
    probs = jax.nn.softmax(ordered, axis=-1)  # [R, V]
    before = jnp.cumsum(probs, axis=-1) - probs  # [R, V]: probability of the tokens ranked above
    n_keep = jnp.maximum(jnp.sum(before < rp.top_p[:, None], axis=-1), 1)  # [R]
    last = jnp.take_along_axis(ordered, (n_keep - 1)[:, None], axis=-1)  # [R, 1]
    cut = jnp.maximum(kth, last)  # [R, 1]
    return jnp.where(scaled >= cut, scaled, -jnp.inf)  # [R, V]


def probabilities(logits: jax.Array, rp: RowParams) -> jax.Array:
    """The distribution [R, V] each row samples from (one-hot at the argmax for greedy rows)."""
    greedy = jax.nn.one_hot(jnp.argmax(logits, axis=-1), logits.shape[-1], dtype=jnp.float32)  # [R, V]
    sampled = jax.nn.softmax(filtered_logits(logits, rp), axis=-1)  # [R, V]
    return jnp.where((rp.temperature > 0)[:, None], sampled, greedy)


def sample(logits: jax.Array, rp: RowParams) -> jax.Array:
    """One token per row [R] int32: the argmax for greedy rows, a seeded draw for the others."""
    keys = token_keys(rp.seed, rp.position)  # [R]
    drawn = jax.vmap(jax.random.categorical)(keys, filtered_logits(logits, rp))  # [R]
    return jnp.where(rp.temperature > 0, drawn, jnp.argmax(logits, axis=-1)).astype(jnp.int32)
