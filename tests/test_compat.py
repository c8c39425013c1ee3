"""scalelib.compat: the JAX-version shims behave as documented."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat


def _compile_sharded_step(fast):
    """A psum of per-device matmuls, compiled with ``fast_compiles(fast)`` (from one source line,
    so that even the HLO's source locations agree)."""
    mesh = compat.make_mesh((4,), ("data",), devices=jax.devices()[:4])
    f = compat.shard_map(lambda w, x: jax.lax.psum(jnp.tanh(x @ w), "data"), mesh=mesh,
                         in_specs=(P(), P("data")), out_specs=P())
    w = jax.device_put(jnp.eye(16) / 2, NamedSharding(mesh, P()))  # [D, D] replicated
    x = jax.device_put(jnp.arange(128.0).reshape(8, 16) / 128, NamedSharding(mesh, P("data")))  # [B, D]
    compat.fast_compiles(fast)
    try:
        return jax.jit(f).lower(w, x).compile(), (w, x)
    finally:
        compat.fast_compiles(False)


def test_fast_compiles_keeps_the_hlo_and_its_analyses():
    (before, args), (fast, _) = (_compile_sharded_step(flag) for flag in (False, True))
    assert not jax.config.read("jax_disable_most_optimizations")  # switched back off
    assert fast.as_text() == before.as_text()
    assert fast.cost_analysis()["flops"] == before.cost_analysis()["flops"]
    assert fast.memory_analysis().argument_size_in_bytes == before.memory_analysis().argument_size_in_bytes
    assert jnp.allclose(fast(*args), before(*args), rtol=1e-6)
