"""The expert-parallel MoE layer (scalelib.parallel.expert) against the dense-dispatch ``model.moe``.

The layer-level comparison runs in float64 at RTOL / ATOL: capacity-based routing sums k expert
outputs per token where the dense layer sums all E (most multiplied by 0), so only the order of
the sums differs; the router's gradient is a sum over all tokens of terms of size ~5 that cancel
to ~0.02, and on jax 0.7's XLA:CPU the two float32 summation orders differ by 1.4e-6, beyond ATOL;
in float64 the same tolerances test the routing itself, not rounding. The capacity factor is E / k,
which gives every expert a slot for every token: nothing can be dropped. The full training step is
checked with every other scheme in tests/test_parallel_schemes.py.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, placement
from scalelib.parallel import expert as ep
from scalelib.parallel.compare import ATOL, RTOL

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
    specs = ep.ExpertParallel(NO_DROP).layer_specs(p, dict(mesh.shape)).values()
    placed = {k: placement.put(v, NamedSharding(mesh, s)) for (k, v), s in zip(p.items(), specs)}
    xs = placement.put(x, NamedSharding(mesh, P("expert")))

    def out_and_grads(layer, p_, x_):  # the output and the vjp of a random cotangent, in one program
        out, vjp = jax.vjp(layer, p_, x_)
        return out, vjp(w)

    out, grads = jax.jit(lambda p_, x_: out_and_grads(lambda a, b: ep.ExpertParallel(NO_DROP).moe_layer(CFG, a, b, mesh), p_, x_))(
        placed, xs)
    ref_out, ref_grads = jax.jit(lambda p_, x_: out_and_grads(lambda a, b: model.moe(CFG, a, b), p_, x_))(p, x)
    assert out.dtype == ref_out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), rtol=RTOL, atol=ATOL)
    assert_trees_close(grads, ref_grads)


def test_small_capacity_drops_tokens():
    mesh = mesh_of(2)
    p = jax.tree.map(lambda a: a[0], model.init(jax.random.key(0), CFG)["layers"])
    x = jax.random.normal(jax.random.key(1), (2, 8, CFG.d_model))  # [B, T, D]
    out = jax.jit(lambda x_: ep.ExpertParallel(0.25).moe_layer(CFG, p, x_, mesh))(x)  # C = 1 slot per expert
    assert not np.allclose(np.asarray(out), np.asarray(model.moe(CFG, p, x)), rtol=RTOL, atol=ATOL)


