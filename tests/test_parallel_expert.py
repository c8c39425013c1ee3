"""Expert parallelism (scalelib.parallel.expert) against the dense-dispatch ``model.moe``.

Float32 at RTOL / ATOL: capacity-based routing sums k expert outputs per token where the dense
layer sums all E (most multiplied by 0), so only the order of the sums differs. The layer-level
comparison runs in float64: there the router's gradient is a sum over all tokens of terms of size ~5
that cancel to ~0.02, and on jax 0.7's XLA:CPU the two float32 summation orders differ by 1.4e-6,
beyond ATOL; in float64 the same tolerances test the routing itself, not rounding. The capacity
factor is E / k, which gives every expert a slot for every token: nothing can be dropped.
Full steps use Adam with eps = lr (see tests/test_parallel_pipeline.py for why).
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
from scalelib.parallel import expert as ep

RTOL, ATOL = 1e-5, 1e-6
HP = train.Adam(learning_rate=1e-2, eps=1e-2)
CFG = model.small_config(n_experts=8, experts_per_token=2, expert_d_ff=32, n_shared_experts=1, router_bias=True)
NO_DROP = CFG.n_experts / CFG.experts_per_token


def assert_trees_close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=RTOL, atol=ATOL), a, b)


def mesh_of(n):
    return compat.make_mesh((n,), ("expert",), devices=jax.devices()[:n])


def test_capacity():
    assert ep.capacity(32, 8, 2, NO_DROP) == 32  # a slot per token
    assert ep.capacity(32, 8, 2, 1.0) == 8  # the balanced load n k / E
    assert ep.capacity(32, 8, 2, 1.1) == 9
    with pytest.raises(ValueError, match="capacity_factor"):
        ep.capacity(32, 8, 2, 0.0)


def test_moe_layer_and_its_grads_equal_dense_dispatch():
    with compat.enable_x64():
        _moe_layer_and_its_grads_equal_dense_dispatch(jnp.float64)


def _moe_layer_and_its_grads_equal_dense_dispatch(dtype):
    mesh = mesh_of(4)
    p = jax.tree.map(lambda a: a[0].astype(dtype), model.init(jax.random.key(0), CFG)["layers"])
    p["router_bias"] = jnp.linspace(-0.5, 0.5, CFG.n_experts, dtype=dtype)  # [E] non-zero: its grad path runs
    x = jax.random.normal(jax.random.key(1), (4, 8, CFG.d_model), dtype)  # [B, T, D]
    w = jax.random.normal(jax.random.key(2), x.shape, dtype)  # [B, T, D] a random output cotangent
    placed = {k: jax.device_put(v, NamedSharding(mesh, s)) for (k, v), s in zip(p.items(), ep.layer_specs(p).values())}
    xs = jax.device_put(x, NamedSharding(mesh, P("expert")))

    def out_and_grads(layer, p_, x_):  # the output and the vjp of a random cotangent, in one program
        out, vjp = jax.vjp(layer, p_, x_)
        return out, vjp(w)

    out, grads = jax.jit(lambda p_, x_: out_and_grads(lambda a, b: ep.moe_layer(CFG, a, b, mesh, NO_DROP), p_, x_))(
        placed, xs)
    ref_out, ref_grads = jax.jit(lambda p_, x_: out_and_grads(lambda a, b: model.moe(CFG, a, b), p_, x_))(p, x)
    assert out.dtype == ref_out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), rtol=RTOL, atol=ATOL)
    assert_trees_close(grads, ref_grads)


def test_small_capacity_drops_tokens():
    mesh = mesh_of(2)
    p = jax.tree.map(lambda a: a[0], model.init(jax.random.key(0), CFG)["layers"])
    x = jax.random.normal(jax.random.key(1), (2, 8, CFG.d_model))  # [B, T, D]
    out = jax.jit(lambda x_: ep.moe_layer(CFG, p, x_, mesh, 0.25))(x)  # C = 1 slot per expert
    assert not np.allclose(np.asarray(out), np.asarray(model.moe(CFG, p, x)), rtol=RTOL, atol=ATOL)


@pytest.fixture(scope="module")
def compiled_step():
    """The expert-parallel training step over 4 devices, compiled once (numerics and HLO)."""
    mesh = mesh_of(4)
    state = train.init_state(jax.random.key(0), CFG)
    tokens = train.batch(jax.random.key(1), CFG, 4, 8)
    placed = jax.device_put(tokens, NamedSharding(mesh, P("expert")))  # the reference step takes them unplaced
    sharded = ep.shard_state(state, mesh)
    compiled = jax.jit(ep.make_step(CFG, mesh, NO_DROP, HP)).lower(sharded, placed).compile()
    return compiled, sharded, placed, state, tokens, mesh


def test_training_steps_equal_reference_steps(compiled_step):
    step, sharded, placed, state, tokens, _ = compiled_step
    ref = jax.jit(train.make_step(CFG, HP))
    for _ in range(3):
        sharded, loss = step(sharded, placed)
        state, ref_loss = ref(state, tokens)
        np.testing.assert_allclose(float(loss), float(ref_loss), rtol=RTOL)
    assert_trees_close(sharded.params, state.params)
    assert sharded.params["layers"]["w_up"].sharding.spec[:2] == (None, "expert")


def test_config_errors_say_what_to_change():
    with pytest.raises(ValueError, match="n_experts=8 must be a multiple"):
        ep.make_loss_and_grads(CFG, mesh_of(3), NO_DROP)(model.init(jax.random.key(0), CFG),
                                                         train.batch(jax.random.key(0), CFG, 3, 8))
    with pytest.raises(ValueError, match="MoE config"):
        ep.moe_layer(model.small_config(), {}, jnp.zeros((2, 4, 64)), mesh_of(2), 1.0)


def test_compiled_collectives_match_prediction(compiled_step):
    # Layers are unrolled: 2 AllToAlls per layer forward and their 2 transposes backward, one tuple
    # all-reduce for all replicated gradients and the loss (nothing is combined or split by XLA);
    # Adam runs on each shard with no communication.
    compiled, *_, mesh = compiled_step
    text = compiled.as_text()
    seen = Counter((o.kind, o.axes, o.result_bytes) for o in hlo.collective_ops(text, dict(mesh.shape)))
    want = Counter()
    for c in ep.predicted_collectives(CFG, 4, 4, 8, NO_DROP):
        want[(c.kind, c.axes, c.bytes_per_device)] += c.count
    assert seen == want


def test_memory_matches_prediction(compiled_step):
    # Temp bytes get the loose bound of tests/test_parallel_data.py: full weights + full grads + every
    # activation of the device's B / X sequences without remat + logits and log-probabilities.
    compiled, _, _, state, _, _ = compiled_step
    pred = ep.predicted_memory_bytes(CFG, 4, 4, 8)
    m = compiled.memory_analysis()
    assert m.argument_size_in_bytes == pred.argument_bytes
    assert m.temp_size_in_bytes <= temp_bound_bytes(CFG, 1, seq_len=8)
    n_expert = sum(model.param_count(state.params["layers"][k]) for k in ep.EXPERT_WEIGHTS)
    assert pred.params_bytes == 4 * (model.param_count(state.params) - n_expert + n_expert // 4)
    assert pred.batch_bytes == 1 * 9 * 4  # one [T+1] int32 row per device
