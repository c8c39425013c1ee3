import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, placement

_COMPILES: list[str] = []
_LISTENING = [False]


def _on_event(name: str, _seconds: float, **_: object) -> None:
    if _LISTENING[0] and name.endswith("backend_compile_duration"):
        _COMPILES.append(name)


jax.monitoring.register_event_duration_secs_listener(_on_event)


def compiles(fn):
    """fn's result and how many programs XLA compiled while it ran."""
    _COMPILES.clear()
    _LISTENING[0] = True
    try:
        out = jax.block_until_ready(fn())
    finally:
        _LISTENING[0] = False
    return out, len(_COMPILES)


@pytest.fixture(scope="module")
def mesh():
    return compat.make_mesh((2, 4), ("x", "y"))


# shapes no other test in the process places, so JAX's own path would have to compile its slicing program
@pytest.mark.parametrize("shape, dtype, spec", [
    ((24, 40), jnp.float32, P("y")),
    ((8, 12, 5), jnp.bfloat16, P(("x", "y"), None)),
    ((6, 36), jnp.int32, P("x", "y")),
    ((10, 3), jnp.float32, P()),
])
def test_same_values_and_layout_as_device_put_without_compiling(mesh, shape, dtype, spec):
    x = jax.random.normal(jax.random.key(3), shape).astype(dtype)  # held whole by one CPU device
    target = NamedSharding(mesh, spec)
    got, n = compiles(lambda: placement.put(x, target))
    assert n == 0
    want = jax.device_put(x, target)
    assert got.sharding == want.sharding == target and got.dtype == x.dtype
    for g, w in zip(got.addressable_shards, want.addressable_shards, strict=True):
        assert g.device == w.device and g.index == w.index
        np.testing.assert_array_equal(np.asarray(g.data), np.asarray(w.data))


def test_jax_own_path_would_compile(mesh):
    """What put saves: JAX cuts an array held by one device with a compiled program (so the test above can fail)."""
    x = jnp.ones((40, 24))
    _, n = compiles(lambda: jax.device_put(x, NamedSharding(mesh, P("y"))))
    assert n >= 1


def test_onto_one_device_or_from_several_it_is_device_put(mesh):
    x = jnp.arange(12.0)
    one = jax.sharding.SingleDeviceSharding(next(iter(x.sharding.device_set)))
    assert placement.put(x, one).unsafe_buffer_pointer() == x.unsafe_buffer_pointer()  # already there: no copy
    split = jax.device_put(jnp.arange(64.0).reshape(8, 8), NamedSharding(mesh, P("x")))
    moved = placement.put(split, NamedSharding(mesh, P(None, "y")))
    assert moved.sharding.spec == P(None, "y")
    np.testing.assert_array_equal(np.asarray(moved), np.arange(64.0).reshape(8, 8))


def test_keys_and_tracers_take_jax_path(mesh):
    keys = jax.random.split(jax.random.key(0), 8)
    placed = placement.put(keys, NamedSharding(mesh, P(("x", "y"))))
    assert jax.dtypes.issubdtype(placed.dtype, jax.dtypes.prng_key) and placed.sharding.spec == P(("x", "y"))
    assert (jax.random.key_data(placed) == jax.random.key_data(keys)).all()

    target = NamedSharding(mesh, P("x"))
    out = jax.jit(lambda v: placement.put(v * 2, target))(jnp.arange(8.0))  # under jit: a resharding
    want = jax.jit(lambda v: jax.device_put(v * 2, target))(jnp.arange(8.0))
    assert out.sharding == want.sharding
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(8.0))
    auto = NamedSharding(compat.make_mesh((2, 4), ("x", "y"), kind="auto"), P("x"))
    grads = jax.grad(lambda v: (placement.put(v, auto) ** 2).sum())(jnp.arange(8.0))  # an eager grad's tracer
    np.testing.assert_array_equal(np.asarray(grads), 2 * np.arange(8.0))


def test_a_tracer_that_claims_a_placement_still_takes_jax_path(mesh):
    """Should a later JAX give tracers a sharding, put must not try to read one into numpy (it cannot)."""
    target = NamedSharding(mesh, P("x"))
    one_cpu = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def traced(v):
        y = v * 2
        with pytest.MonkeyPatch.context() as patch:  # only while put looks: JAX's own code reads these too
            patch.setattr(type(y), "sharding", property(lambda self: one_cpu), raising=False)
            patch.setattr(type(y), "is_fully_addressable", property(lambda self: True), raising=False)
            assert y.sharding is one_cpu  # the tracer claims to be held whole by one CPU device
            assert placement._host_view(y) is None
        return placement.put(y, target)

    out = jax.jit(traced)(jnp.arange(8.0))
    assert out.sharding == jax.jit(lambda v: jax.device_put(v * 2, target))(jnp.arange(8.0)).sharding
    np.testing.assert_array_equal(np.asarray(out), 2 * np.arange(8.0))
