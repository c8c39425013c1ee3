"""scalelib.kernels.flash_attention against naive attention: values and gradients.

Tolerance (float32, fixed): rtol = atol = 1e-5 for outputs and for dq, dk, dv. Blockwise
summation reorders the float32 additions, so results differ from the naive version by a few
ulps (observed max ~1e-6 with O(1) inputs); 1e-5 leaves that margin and nothing more.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib.kernels import (
    finalize_softmax_state,
    flash_attention,
    init_softmax_state,
    online_softmax_update,
    reference_attention,
)

RTOL = ATOL = 1e-5


def _qkv(b, t, s, n, k, h, seed=0):
    # numpy's generator: jax.random would compile a sampler for every new shape, and each case has new shapes
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, t, n, h), np.float32)  # [B, T, N, H]
    kk = rng.standard_normal((b, s, k, h), np.float32)  # [B, S, K, H]
    v = rng.standard_normal((b, s, k, h), np.float32)  # [B, S, K, H]
    d_out = rng.standard_normal((b, t, n, h), np.float32)  # [B, T, N, H]
    return q, kk, v, d_out


def _check_against_reference(b, t, s, n, k, h, causal, block_q, block_k, seed=0):
    q, kk, v, d_out = _qkv(b, t, s, n, k, h, seed)

    @jax.jit
    def both(q, kk, v, d_out):
        out = []
        for fn in (lambda *a: flash_attention(*a, causal, block_q=block_q, block_k=block_k),
                   lambda *a: reference_attention(*a, causal)):
            o, vjp = jax.vjp(fn, q, kk, v)
            out.append((o, *vjp(d_out)))
        return out

    flash, ref = both(q, kk, v, d_out)
    for name, a, r in zip(("out", "dq", "dk", "dv"), flash, ref):
        np.testing.assert_allclose(a, r, rtol=RTOL, atol=ATOL, err_msg=name)


CASES = {  # (B, T, S, N, K, H, block_q, block_k)
    "mha": (2, 16, 16, 4, 4, 8, 4, 8),
    "gqa": (1, 16, 16, 4, 2, 8, 8, 4),
    "mqa": (1, 8, 8, 3, 1, 4, 4, 4),
    "fewer_queries_than_keys": (1, 8, 24, 2, 1, 4, 4, 8),
}


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_naive_attention(case, causal):
    b, t, s, n, k, h, bq, bk = CASES[case]
    _check_against_reference(b, t, s, n, k, h, causal, bq, bk)


@settings(max_examples=8, deadline=None)
@given(b=st.integers(1, 2), k=st.integers(1, 2), g=st.integers(1, 3), h=st.sampled_from([2, 4]),
       bq=st.sampled_from([2, 4]), bk=st.sampled_from([2, 4]), nq=st.integers(1, 3), extra_kv=st.integers(0, 2),
       causal=st.booleans())
def test_matches_naive_attention_on_random_shapes(b, k, g, h, bq, bk, nq, extra_kv, causal):
    t = bq * nq
    s = bk * (-(-t // bk) + extra_kv)  # a multiple of bk with S >= T
    _check_against_reference(b, t, s, k * g, k, h, causal, bq, bk, seed=t * s)


def test_online_softmax_update_merges_blocks():
    """Two blocks folded in one after the other equal one softmax over all keys."""
    keys = jax.random.split(jax.random.key(1), 2)
    scores = jax.random.normal(keys[0], (3, 10)) * 4  # [r, c]
    v = jax.random.normal(keys[1], (10, 5))  # [c, h]
    state = init_softmax_state((3,), 5)
    state = online_softmax_update(state, scores[:, :6], v[:6])
    state = online_softmax_update(state, scores[:, 6:], v[6:])
    out, lse = finalize_softmax_state(state)
    np.testing.assert_allclose(out, jax.nn.softmax(scores, -1) @ v, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(lse, jax.nn.logsumexp(scores, -1), rtol=RTOL, atol=ATOL)
    # A fully masked block changes nothing, before or after real keys.
    masked = jnp.full((3, 4), -jnp.inf)  # [r, c]
    again = online_softmax_update(state, masked, jnp.ones((4, 5)))
    np.testing.assert_allclose(finalize_softmax_state(again)[0], out)
    empty = online_softmax_update(init_softmax_state((3,), 5), masked, jnp.ones((4, 5)))
    assert bool((empty.l == 0).all()) and bool(jnp.isneginf(empty.m).all())


def test_errors_say_what_to_change():
    q, kk, v, _ = _qkv(1, 12, 12, 4, 2, 4)
    with pytest.raises(ValueError, match="not a multiple of its block size 8"):
        flash_attention(q, kk, v, block_q=8, block_k=4)
    with pytest.raises(ValueError, match="query heads N=3 are not a multiple of KV heads K=2"):
        flash_attention(q[:, :, :3], kk, v)
    with pytest.raises(ValueError, match="T <= S"):
        flash_attention(q, kk[:, :4], v[:, :4], causal=True)
