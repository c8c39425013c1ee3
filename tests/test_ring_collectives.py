"""Hand-built ring collectives against jax.lax, the cost model's counts and XLA's compiled HLO."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import collectives, compat, placement
from scalelib import ring_collectives as rc

LAX = {
    "all_gather": lambda x, a: jax.lax.all_gather(x, a, tiled=True),
    "reduce_scatter": lambda x, a: jax.lax.psum_scatter(x, a, tiled=True),
    "all_reduce": lambda x, a: jax.lax.psum(x, a),
    "all_to_all": lambda x, a: jax.lax.all_to_all(x, a, 0, 0, tiled=True),
}
HLO_NAME = {"all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
            "all_reduce": "all-reduce", "all_to_all": "all-to-all"}
# (mesh shape, axis names, ring axis)
MESHES = [((8,), ("x",), "x"), ((2, 4), ("a", "b"), "b"), ((2, 4), ("a", "b"), "a"),
          ((4, 2), ("a", "b"), "a"), ((4, 2), ("a", "b"), "b")]


def _case(shape, names, op, n, rows_per_block, cols, dtype, seed=0, devices=None):
    """Mesh, sharding spec and integer-valued data whose per-device part fits ``op`` on a ring of n."""
    mesh = compat.make_mesh(shape, names, devices=devices)
    spec = P(names)  # dim 0 split over every mesh axis: each device holds different data
    local_rows = rows_per_block * (1 if op == "all_gather" else n)
    data = np.random.default_rng(seed).integers(-1000, 1000, (local_rows * mesh.size, cols))
    x = placement.put(jnp.asarray(data, dtype), NamedSharding(mesh, spec))  # [devices * rows, cols]
    return mesh, spec, x


def _counted_bytes(op, n, x, mesh):
    """Bytes of V (one copy of the logical array) as collectives.py defines it, from the local shard."""
    local_bytes = x.nbytes / mesh.size
    return local_bytes * n if op in ("all_gather", "all_to_all") else local_bytes


def _check(op, bidi, mesh, spec, axis, x):
    n = mesh.shape[axis]
    ring = rc.on_mesh(lambda v: rc.OPS[op](v, axis, bidi), mesh, spec, spec)
    ref = rc.on_mesh(lambda v: LAX[op](v, axis), mesh, spec, spec)
    np.testing.assert_array_equal(np.asarray(ring(x)), np.asarray(ref(x)))
    traced = rc.trace_ppermutes(ring, x)
    want = collectives.axis_counts(op, n, bidi, _counted_bytes(op, n, x, mesh))
    assert (traced.steps, traced.sends) == (want.steps, want.sends)
    assert traced.bytes_sent == want.bytes_sent
    assert traced.max_message_bytes == want.max_step_link_bytes
    assert traced.shifts <= {1, -1}, "a ring collective must only talk to its neighbours"


@pytest.mark.parametrize("op", list(rc.OPS))
@pytest.mark.parametrize("bidi", [False, True], ids=["one_way", "both_ways"])
@pytest.mark.parametrize("shape,names,axis", MESHES, ids=lambda v: str(v))
def test_ring_equals_lax_and_cost_model(op, bidi, shape, names, axis):
    mesh, spec, x = _case(shape, names, op, dict(zip(names, shape))[axis], 2, 3, jnp.float32)
    _check(op, bidi, mesh, spec, axis, x)


@settings(max_examples=15, deadline=None)
@given(op=st.sampled_from(list(rc.OPS)), bidi=st.booleans(), n=st.integers(1, 8),
       rows=st.integers(1, 3), cols=st.integers(1, 4), dtype=st.sampled_from([jnp.float32, jnp.int32]),
       seed=st.integers(0, 2**16))
def test_ring_any_size(op, bidi, n, rows, cols, dtype, seed):
    """Odd and even rings of 1..8 devices, varied shard shapes and dtypes."""
    if bidi and n % 2 == 0 and op != "all_to_all":
        rows, cols = 2 * rows, cols  # the opposite device's shard is sent as two halves
    mesh, spec, x = _case((n,), ("r",), op, n, rows, cols, dtype, seed, devices=jax.devices()[:n])
    _check(op, bidi, mesh, spec, "r", x)


@pytest.mark.parametrize("op", list(rc.OPS))
def test_xla_compiles_lax_collectives_to_their_hlo_op(op):
    mesh, spec, x = _case((2, 4), ("a", "b"), op, 4, 2, 3, jnp.float32)
    kinds = rc.compiled_collectives(rc.on_mesh(lambda v: LAX[op](v, "b"), mesh, spec, spec), x)
    assert HLO_NAME[op] in kinds


@pytest.mark.parametrize("op", list(rc.OPS))
def test_ring_version_compiles_to_collective_permutes_only(op):
    mesh, spec, x = _case((8,), ("x",), op, 8, 2, 3, jnp.float32)
    kinds = rc.compiled_collectives(rc.on_mesh(lambda v: rc.OPS[op](v, "x", True), mesh, spec, spec), x)
    assert kinds == {"collective-permute"}


def test_bidirectional_even_ring_needs_even_shard():
    mesh, spec, x = _case((8,), ("x",), "all_gather", 8, 1, 3, jnp.float32)
    with pytest.raises(ValueError, match="even"):
        rc.on_mesh(lambda v: rc.all_gather(v, "x", True), mesh, spec, spec)(x)


def test_block_count_must_match_ring():
    mesh = compat.make_mesh((8,), ("x",))
    x = placement.put(jnp.zeros((8 * 3, 2)), NamedSharding(mesh, P("x")))  # 3 rows per device
    with pytest.raises(ValueError, match="multiple of the ring size 8"):
        rc.on_mesh(lambda v: rc.reduce_scatter(v, "x"), mesh, P("x"), P("x"))(x)
