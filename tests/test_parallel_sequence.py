"""Sequence / context parallelism (scalelib.parallel.sequence) against single-device attention and training.

Float32 at RTOL / ATOL: the online softmax visits the keys in blocks, so only the order of the
sums differs from ``reference_attention``. Full steps use Adam with eps = lr
(see tests/test_parallel_pipeline.py for why).
"""

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, hlo, model, train
from tests.test_parallel_data import temp_bound_bytes
from scalelib.kernels import reference_attention
from scalelib.parallel import sequence as sp

RTOL, ATOL = 1e-5, 1e-6
HP = train.Adam(learning_rate=1e-2, eps=1e-2)
CFG = model.small_config()
MOE = model.small_config(n_layers=1, n_experts=4, experts_per_token=2, expert_d_ff=32, qkv_bias=True)
METHODS = ["all_gather", "ring"]


def assert_trees_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL), a, b)


def mesh_of(n):
    return compat.make_mesh((n,), ("seq",), devices=jax.devices()[:n])


@pytest.fixture(scope="module", params=METHODS)
def compiled_grads(request):
    """Loss and grads of a small MoE model (qkv biases on) with T split 4 ways, compiled once per method.

    MoE (dense dispatch) is per token, so it runs unchanged on a sequence chunk. Tokens arrive
    replicated: split on the sequence, the one-token shift of the targets would itself need a
    collective-permute between neighbouring chunks.
    """
    mesh = mesh_of(4)
    params = sp.shard_state(model.init(jax.random.key(0), MOE), mesh)
    tokens = jax.device_put(train.batch(jax.random.key(1), MOE, 2, 16), NamedSharding(mesh, P()))
    compiled = jax.jit(sp.make_loss_and_grads(MOE, mesh, request.param)).lower(params, tokens).compile()
    return request.param, compiled, params, tokens, mesh


def test_grads_equal_reference(compiled_grads):
    _, compiled, params, tokens, _ = compiled_grads
    loss, grads = compiled(params, tokens)
    ref_loss, ref_grads = jax.jit(train.loss_and_grads, static_argnums=2)(params, tokens, MOE)
    np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    assert_trees_close(grads, ref_grads)


def test_compiled_collectives_match_prediction(compiled_grads):
    # Layers are unrolled, so each predicted op is one HLO op: K and V are gathered (or permuted)
    # separately, never combined, and all gradients plus the loss share one tuple all-reduce.
    method, compiled, _, _, mesh = compiled_grads
    text = compiled.as_text()
    seen = Counter((o.kind, o.axes, o.result_bytes) for o in hlo.collective_ops(text, dict(mesh.shape)))
    want = Counter()
    for c in sp.predicted_collectives(MOE, 4, 2, 16, method):
        axes = None if c.kind == "collective_permute" else c.axes  # permutes have pairs, not groups
        want[(c.kind, axes, c.bytes_per_device)] += c.count
    assert seen == want


@pytest.mark.parametrize("method", METHODS)
def test_attention_and_grads_equal_reference(method):
    mesh = mesh_of(4)
    ks = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(ks[0], (2, 16, 4, 8))  # [B, T, N, H]
    k = jax.random.normal(ks[1], (2, 16, 2, 8))  # [B, T, K, H] GQA, G = 2
    v = jax.random.normal(ks[2], (2, 16, 2, 8))  # [B, T, K, H]
    w = jax.random.normal(ks[3], q.shape)  # [B, T, N, H] output cotangent
    put = lambda a: jax.device_put(a, NamedSharding(mesh, P(None, "seq")))  # noqa: E731

    def out_and_grads(attn, *qkv):  # the output and the vjp of a random cotangent, in one program
        out, vjp = jax.vjp(attn, *qkv)
        return out, vjp(w)

    sharded = jax.jit(lambda *a: out_and_grads(lambda *b: sp.attention(*b, mesh, method), *a))
    out, grads = sharded(put(q), put(k), put(v))
    ref_out, ref_grads = jax.jit(lambda *a: out_and_grads(reference_attention, *a))(q, k, v)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), rtol=RTOL, atol=ATOL)
    assert_trees_close(grads, ref_grads)


def test_ring_training_steps_equal_reference_steps():
    mesh = mesh_of(4)
    state = train.init_state(jax.random.key(0), CFG)
    tokens = jax.device_put(train.batch(jax.random.key(1), CFG, 2, 16), NamedSharding(mesh, P()))
    step, ref = jax.jit(sp.make_step(CFG, mesh, "ring", HP)), jax.jit(train.make_step(CFG, HP))
    sharded = sp.shard_state(state, mesh)
    for _ in range(3):
        sharded, loss = step(sharded, tokens)
        state, ref_loss = ref(state, tokens)
        np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    assert_trees_close(sharded.params, state.params)


def test_errors():
    with pytest.raises(ValueError, match="multiple of the 'seq' axis size 4"):
        sp.make_loss_and_grads(CFG, mesh_of(4), "ring")(model.init(jax.random.key(0), CFG),
                                                        train.batch(jax.random.key(0), CFG, 2, 6))
    with pytest.raises(ValueError, match="'all_gather' or 'ring'"):
        z = jnp.zeros((1, 4, 2, 4))
        sp.attention(z, z, z, mesh_of(2), "zigzag")


def test_memory_matches_prediction(compiled_grads):
    # The fixture compiles loss-and-grads (params + replicated tokens are its arguments); one full ring
    # step adds the Adam moments and the int32 counter. Temp bytes get the loose bound of
    # tests/test_parallel_data.py for the whole batch: full weights + full grads + every activation
    # without remat + logits and log-probabilities.
    method, compiled, params, tokens, mesh = compiled_grads
    pred = sp.predicted_memory_bytes(MOE, 4, 2, 16)
    m = compiled.memory_analysis()
    assert m.argument_size_in_bytes == pred.params_bytes + pred.batch_bytes
    assert m.temp_size_in_bytes <= temp_bound_bytes(MOE, 2, seq_len=16)
    assert pred.params_bytes == 4 * model.param_count(params) and pred.batch_bytes == 2 * 17 * 4
    if method == "ring":  # one full step is enough to check the optimizer's share
        state = sp.shard_state(train.init_state(jax.random.key(0), MOE), mesh)
        step = jax.jit(sp.make_step(MOE, mesh, method, HP)).lower(state, tokens).compile()
        assert step.memory_analysis().argument_size_in_bytes == pred.argument_bytes
        assert step.memory_analysis().temp_size_in_bytes <= temp_bound_bytes(MOE, 2, seq_len=16)
