"""scalelib.inference.decode against full recomputation, and its cost against XLA's count.

Correctness: greedy generation with the cache must give the logits ``model.forward`` gives on
the whole sequence (prompt plus generated tokens), within rtol = atol = 1e-5 in float32; the
chosen tokens must be the argmax of the recomputed logits.

Cost: one compiled decode step (layers unrolled, per-layer weights and cache buffers, the cache
donated so its update is in place) is held against ``compiled.cost_analysis()``:

* FLOPs, as in tests/test_model.py: the matmul-only prediction sits a little below XLA (which
  also counts norms, softmax, RoPE, the activation); both it and the prediction with the
  elementwise estimate are held to FLOPS_RTOL = 2%.
* Bytes: XLA charges a gather for its whole operand, so the comparison adds the rest of the
  embedding table to the prediction (the prediction reads only the looked-up rows). Beyond
  that XLA's CPU program also writes and reads the [B, N, S] attention scores and
  probabilities between kernels, which a fused (flash) kernel would keep on chip; at the sizes
  below that is ~8% more. So XLA must lie in [1, 1 + BYTES_SLACK] x the adjusted prediction.
"""

from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scalelib import model
from scalelib import transformer as tf
from scalelib import transformer_flops as fl
from scalelib.inference import decode
from scalelib.inference import step_time as stt
from tests import test_model
from tests.conftest import XLA_DEFAULT_FUSION
from tests.test_model import _tokens

RTOL = ATOL = 1e-5
FLOPS_RTOL = 0.02
BYTES_SLACK = 0.12
# Weights and cache dominate: D = 256, F = 1024, H = 64, a 256-slot cache.
COST_CFG = model.small_config(d_model=256, head_dim=64, d_ff=1024, vocab_size=512)
COST_B, COST_S = 4, 256


_init = lru_cache(maxsize=None)(test_model._init)  # the same weights as tests/test_model.py, built once per config


VARIANTS = {
    "small": {},
    "mqa_tied_biases": dict(n_kv_heads=1, tied_embeddings=True, qkv_bias=True, o_bias=True, norm_bias=True),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_cached_generation_matches_full_forward(name):
    cfg = model.small_config(**VARIANTS[name])
    params = _init(cfg)
    prompt, steps = _tokens((2, 7), cfg.vocab_size), 6
    tokens, logits = jax.jit(decode.generate, static_argnums=(2, 3))(params, prompt, cfg, steps)
    assert tokens.shape == (2, steps) and logits.shape == (2, steps, cfg.vocab_size)
    whole = jnp.concatenate([prompt, tokens[:, :-1]], axis=1)  # [B, T0 + steps - 1]
    full = jax.jit(model.forward, static_argnums=2)(params, whole, cfg)[:, prompt.shape[1] - 1:]  # [B, steps, V]
    np.testing.assert_allclose(logits, full, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(tokens, jnp.argmax(full, axis=-1))


def test_chunked_prefill_unstacked_weights_and_a_donated_step_give_the_same_logits():
    cfg = model.small_config()
    params = _init(cfg)
    seq = _tokens((3, 9), cfg.vocab_size)
    full = jax.jit(model.forward, static_argnums=2)(params, seq, cfg)  # [B, 9, V]
    first, cache = jax.jit(decode.prefill, static_argnums=(2, 3))(params, seq[:, :4], cfg, 12)
    rest, cache = jax.jit(decode.extend, static_argnums=3)(decode.unstack_layers(params), seq[:, 4:], cache, cfg)
    np.testing.assert_allclose(jnp.concatenate([first, rest], axis=1), full, rtol=RTOL, atol=ATOL)
    assert int(cache.length) == 9 and cache.max_len == 12
    # a generate step on the donated cache continues the same sequence
    nxt = jnp.argmax(rest[:, -1], axis=-1)  # [B]
    step = jax.jit(decode.decode_step, static_argnums=3, donate_argnums=2)
    logits, cache = step(params, nxt, cache, cfg)  # [B, V]
    longer = jax.jit(model.forward, static_argnums=2)(params, jnp.concatenate([seq, nxt[:, None]], 1), cfg)
    np.testing.assert_allclose(logits, longer[:, -1], rtol=RTOL, atol=ATOL)
    assert int(cache.length) == 10


def test_decode_rejects_bad_sizes():
    cfg = model.small_config()
    params = _init(cfg)
    prompt = _tokens((2, 5), cfg.vocab_size)
    with pytest.raises(ValueError, match="max_len=6 cannot hold the 5-token prompt plus 3 new tokens"):
        decode.generate(params, prompt, cfg, 3, max_len=6)
    with pytest.raises(ValueError, match="steps must be a positive int"):
        decode.generate(params, prompt, cfg, 0)
    with pytest.raises(ValueError, match="does not fit a cache of max_len=4"):
        decode.prefill(params, prompt, cfg, max_len=4)
    with pytest.raises(ValueError, match="B = the cache's batch 3"):
        decode.extend(params, prompt, decode.init_cache(cfg, 3, 8), cfg)
    with pytest.raises(ValueError, match="batch must be a positive int, got 0"):
        decode.init_cache(cfg, 0, 8)


@pytest.fixture(scope="module")
def compiled_step():
    params = decode.unstack_layers(_init(COST_CFG))
    cache = decode.init_cache(COST_CFG, COST_B, COST_S)._replace(length=jnp.int32(COST_S // 2))
    token = jnp.zeros((COST_B,), jnp.int32)
    step = jax.jit(decode.decode_step, static_argnums=3, donate_argnums=2)
    return step.lower(params, token, cache, COST_CFG).compile(XLA_DEFAULT_FUSION).cost_analysis()


def test_decode_step_flops_match_xla(compiled_step):
    xla = compiled_step["flops"]
    pred = stt.decode_step_cost(COST_CFG, COST_B, COST_S)
    with_elem = fl.forward_flops(COST_CFG, COST_B, COST_S, include_elementwise=True).total_flops
    assert pred.flops == pytest.approx(xla, rel=FLOPS_RTOL)
    assert with_elem == pytest.approx(xla, rel=FLOPS_RTOL)
    assert pred.flops < xla


def test_decode_step_bytes_match_xla(compiled_step):
    xla = compiled_step["bytes accessed"]
    pred = stt.decode_step_cost(COST_CFG, COST_B, COST_S, 4)
    unread_table = (tf.param_counts(COST_CFG).embedding - COST_B * COST_CFG.d_model) * 4  # XLA charges the gather
    adjusted = pred.bytes + unread_table
    assert adjusted <= xla <= (1 + BYTES_SLACK) * adjusted, (xla, adjusted, xla / adjusted)
