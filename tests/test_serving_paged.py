"""scalelib.serving.paged: a mixed step through block tables against the whole-sequence forward, and its cost.

Correctness: one step holding a prompt chunk after cached tokens, a decode token and a fresh
prompt, in scrambled blocks, gives the logits ``model.forward`` gives on each whole sequence
(rtol = atol = 1e-5 in float32, as tests/test_inference_decode.py), and padding writes nothing.

Memory: the pool's bytes per block are ``inference.replica_memory.kv_bytes_per_token`` x block size.

Cost: a decode-only step (B tokens over S cached slots) compiled for the test config of
tests/test_inference_decode.py, against ``compiled.cost_analysis()``:
* FLOPs: ``step_time.decode_step_cost`` (the chapter's model of a decode step), within 2%.
* Bytes: the same model plus what this step does that a dense decode does not, each term named:
  XLA charges a gather and a scatter for their whole operand (the embedding table, as in the
  decode test; the pool three times: the gather reads it, the in-place scatter reads and writes
  it), and the gathered keys and values are written once more before the dot reads them (the
  dense decode reads its cache in place; a fused paged-attention kernel would too). XLA must lie
  in [1, 1 + BYTES_SLACK] x that sum, with the decode test's slack for the attention scores.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scalelib import model
from scalelib import transformer as tf
from scalelib.inference import decode
from scalelib.inference import replica_memory
from scalelib.inference import step_time as stt
from scalelib.serving import paged
from tests.serving_common import CFG, fast_compiles, no_block_leaks, params  # noqa: F401
from tests.conftest import XLA_DEFAULT_FUSION

RTOL = ATOL = 1e-5
FLOPS_RTOL = 0.02
BYTES_SLACK = 0.12
COST_CFG = model.small_config(d_model=256, head_dim=64, d_ff=1024, vocab_size=512)
COST_B, COST_S, COST_BS = 4, 256, 16


def test_bucket():
    assert [paged.bucket(n, 8, 64) for n in (1, 8, 9, 33, 64)] == [8, 8, 16, 64, 64]
    assert paged.bucket(3, 16, 16) == 16 and paged.bucket(20, 1, 24) == 24
    with pytest.raises(ValueError, match="65 does not fit a bucket of at most 64"):
        paged.bucket(65, 8, 64)


def _slots(blocks, positions, bs):
    return [blocks[p // bs] * bs + p % bs for p in positions]


def test_a_mixed_step_through_scrambled_blocks_equals_the_whole_sequence_forward():
    bs, num_blocks = 4, 16
    rng = np.random.default_rng(3)
    seqs = rng.integers(0, CFG.vocab_size, (3, 10)).tolist()
    tables = [[9, 2, 14], [5, 11, 3], [0, 7, 12]]  # any blocks, in any order
    cached = [6, 9, 0]  # tokens already in the pool: a chunk follows, a decode, a fresh prompt
    full = np.asarray(jax.jit(model.forward, static_argnums=2)(params(), jnp.asarray(seqs), CFG))  # [3, 10, V]
    kv = paged.init_pool(CFG, num_blocks, bs)
    dropped = num_blocks * bs

    def step(spans, t_pad):
        toks, pos, slots, rows = [], [], [], []
        for row, (seq, (a, b)) in enumerate(zip(seqs, spans)):
            toks += seq[a:b]
            pos += list(range(a, b))
            slots += _slots(tables[row], range(a, b), bs)
            rows += [row] * (b - a)
        n = len(toks)
        pad = lambda x, v=0: np.array(x + [v] * (t_pad - n), np.int32)
        table = np.zeros((4, 3), np.int32)
        for row, t in enumerate(tables):
            table[row, :len(t)] = t
        return paged.StepInput(pad(toks), pad(pos), pad(slots, dropped), pad(rows), table, np.arange(t_pad, dtype=np.int32)), n

    inp, _ = step([(0, c) for c in cached], 16)
    _, kv = paged.forward_jit(params(), kv, inp, CFG)
    inp, n = step([(c, len(s)) for c, s in zip(cached, seqs)], 16)
    logits, kv = paged.forward_jit(params(), kv, inp, CFG)
    want = np.concatenate([f[c:] for f, c in zip(full, cached)])  # [n, V]
    np.testing.assert_allclose(np.asarray(logits)[:n], want, rtol=RTOL, atol=ATOL)
    untouched = sorted(set(range(num_blocks)) - {b for t in tables for b in t})
    assert all(float(jnp.abs(a[np.array(untouched)]).max()) == 0 for a in kv.k + kv.v)  # padding wrote nothing


@pytest.mark.parametrize("dtype, name", [(jnp.float32, "fp32"), (jnp.bfloat16, "bf16")])
def test_pool_bytes_per_block_are_the_chapters_kv_bytes_per_token(dtype, name):
    pool = paged.init_pool(CFG, 3, 8, dtype)
    assert pool.bytes_per_block == replica_memory.kv_bytes_per_token(CFG, name) * 8
    assert pool.nbytes == 3 * pool.bytes_per_block


@pytest.fixture(scope="module")
def decode_cost():
    width = COST_S // COST_BS
    num_blocks = 2 * COST_B * width  # twice what the step reads: the whole-pool charge is its own term
    abstract_params = jax.eval_shape(lambda k: decode.unstack_layers(model.init(k, COST_CFG)), jax.random.key(0))
    kv = jax.eval_shape(lambda: paged.init_pool(COST_CFG, num_blocks, COST_BS))
    shapes = [(COST_B,)] * 4 + [(COST_B, width), (COST_B,)]
    inp = paged.StepInput(*(jax.ShapeDtypeStruct(s, jnp.int32) for s in shapes))
    cost = paged.forward_jit.lower(abstract_params, kv, inp, COST_CFG).compile(XLA_DEFAULT_FUSION).cost_analysis()
    pool_bytes = sum(a.size * a.dtype.itemsize for a in kv.k + kv.v)
    return cost, pool_bytes


def test_decode_step_flops_match_the_chapters_model(decode_cost):
    cost, _ = decode_cost
    pred = stt.decode_step_cost(COST_CFG, COST_B, COST_S)
    assert pred.flops == pytest.approx(cost["flops"], rel=FLOPS_RTOL) and pred.flops < cost["flops"]


def test_decode_step_bytes_match_the_chapters_model_plus_named_terms(decode_cost):
    cost, pool_bytes = decode_cost
    pred = stt.decode_step_cost(COST_CFG, COST_B, COST_S, 4)
    unread_table = (tf.param_counts(COST_CFG).embedding - COST_B * COST_CFG.d_model) * 4
    gathered = replica_memory.kv_bytes(replica_memory.kv_bytes_per_token(COST_CFG, 4), COST_S, COST_B)  # every token's context, once
    adjusted = pred.bytes + unread_table + 3 * pool_bytes + gathered
    xla = cost["bytes accessed"]
    assert adjusted <= xla <= (1 + BYTES_SLACK) * adjusted, (xla, adjusted, xla / adjusted)
