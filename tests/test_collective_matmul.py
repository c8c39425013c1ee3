"""Collective matmuls against the unsharded product, their gradients, their traced and compiled
communication, and the round-by-round cost model."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from scalelib import compat, hardware, hlo, placement, profiling
from scalelib import ring_collectives as rc
from scalelib.kernels import collective_matmul as cm

# (mesh shape, axis names, ring axis, batch axis)
MESHES = [((2, 4), ("X", "Y"), "Y", "X"), ((4, 2), ("X", "Y"), "Y", "X"), ((8,), ("Y",), "Y", None)]
MESH_IDS = ["2x4", "4x2", "8"]
B, K, N = 8, 16, 32  # x [B, K] . w [K, N]: every local dim stays even on rings of 2, 4 and 8
TILES = {"all_gather": 1, "reduce_scatter": 1, "all_reduce": 2}
NOT_ALLOWED = {"all_gather", "psum_scatter", "reduce_scatter", "all_to_all", "psum", "psum_invariant"}
RTOL = ATOL = 1e-5


def _fn(mesh_case, kind, bidi, devices=None):
    shape, names, ring, batch = mesh_case
    mesh = compat.make_mesh(shape, names, devices=devices)
    return cm.on_mesh(mesh, kind, ring, batch, bidi, num_tiles=TILES[kind])


def _inputs(seed=0, integer=False, b=B, k=K, n=N):
    rng = np.random.default_rng(seed)
    if integer:  # small integers: every partial sum is exact in float32, whatever the order
        return (jnp.asarray(rng.integers(-8, 9, (b, k)), jnp.float32),
                jnp.asarray(rng.integers(-8, 9, (k, n)), jnp.float32))
    return (jnp.asarray(rng.standard_normal((b, k)), jnp.float32),
            jnp.asarray(rng.standard_normal((k, n)), jnp.float32))


@pytest.mark.parametrize("bidi", [False, True], ids=["one_way", "both_ways"])
@pytest.mark.parametrize("kind", cm.KINDS)
@pytest.mark.parametrize("mesh_case", MESHES, ids=MESH_IDS)
def test_equals_unsharded_product(mesh_case, kind, bidi):
    f = _fn(mesh_case, kind, bidi)
    x, w = _inputs(1)
    want = np.asarray(x, np.float64) @ np.asarray(w, np.float64)
    np.testing.assert_allclose(np.asarray(f(x, w)), want, rtol=RTOL, atol=ATOL)
    xi, wi = _inputs(2, integer=True)
    exact = np.asarray(xi, np.int64) @ np.asarray(wi, np.int64)
    np.testing.assert_array_equal(np.asarray(f(xi, wi)), exact)


@pytest.mark.parametrize("bidi", [False, True], ids=["one_way", "both_ways"])
@pytest.mark.parametrize("kind", cm.KINDS)
@pytest.mark.parametrize("mesh_case", MESHES, ids=MESH_IDS)
def test_gradient_equals_unsharded_gradient(mesh_case, kind, bidi):
    f = _fn(mesh_case, kind, bidi)
    x, w = _inputs(3)
    probe = jnp.asarray(np.random.default_rng(4).standard_normal((B, N)), jnp.float32)  # d loss / d out
    sharded = jax.jit(jax.grad(lambda a, b: jnp.sum(f.jitted(a, b) * probe), argnums=(0, 1)))(x, w)
    plain = jax.grad(lambda a, b: jnp.sum(jnp.dot(a, b, precision="highest") * probe), argnums=(0, 1))(x, w)
    for got, want in zip(sharded, plain):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)


# ppermutes one device issues for x [8, 16] . w [16, 32], read from the jaxpr (derived by hand:
# one way N - 1 per ring pass; both ways 2 floor(N / 2); all_reduce = 2 tiles x (scatter + gather)).
PPERMUTES = {  # (kind, ring size, bidirectional) -> (ppermutes, rounds)
    ("all_gather", 4, False): (3, 3), ("all_gather", 4, True): (4, 2),
    ("all_gather", 2, False): (1, 1), ("all_gather", 2, True): (2, 1),
    ("all_gather", 8, False): (7, 7), ("all_gather", 8, True): (8, 4),
    ("reduce_scatter", 4, False): (3, 3), ("reduce_scatter", 4, True): (4, 2),
    ("reduce_scatter", 2, False): (1, 1), ("reduce_scatter", 2, True): (2, 1),
    ("reduce_scatter", 8, False): (7, 7), ("reduce_scatter", 8, True): (8, 4),
    ("all_reduce", 4, False): (12, 6), ("all_reduce", 4, True): (16, 4),
    ("all_reduce", 2, False): (4, 2), ("all_reduce", 2, True): (8, 2),
    ("all_reduce", 8, False): (28, 14), ("all_reduce", 8, True): (32, 8),
}


@pytest.mark.parametrize("bidi", [False, True], ids=["one_way", "both_ways"])
@pytest.mark.parametrize("kind", cm.KINDS)
@pytest.mark.parametrize("mesh_case", MESHES, ids=MESH_IDS)
def test_jaxpr_has_only_the_expected_ppermutes(mesh_case, kind, bidi):
    f = _fn(mesh_case, kind, bidi)
    n = dict(zip(mesh_case[1], mesh_case[0]))[mesh_case[2]]
    x, w = _inputs()
    traced = rc.trace_ppermutes(f.jitted, x, w)
    assert (traced.sends, traced.steps) == PPERMUTES[(kind, n, bidi)]
    assert traced.sends == cm.expected_ppermutes(kind, n, bidi, TILES[kind])
    assert traced.shifts <= {1, -1}, "every message goes to a ring neighbour"
    prims = profiling.jaxpr_primitive_counts(f.jitted, x, w)
    assert prims["ppermute"] == traced.sends
    assert not NOT_ALLOWED & set(prims), f"unexpected collectives {NOT_ALLOWED & set(prims)}"
    assert prims["dot_general"] >= n  # one chunk product per ring position (both ways: halves add some)


@pytest.mark.parametrize("n", [1, 3, 5, 6, 7])
@pytest.mark.parametrize("kind", cm.KINDS)
def test_odd_and_small_rings(n, kind):
    """Rings that the 2-D meshes above do not build: odd sizes take the both-ways path without halves."""
    case = ((n,), ("Y",), "Y", None)
    k = 2 * n * 2  # local contracted / output blocks of 4 columns: halves stay whole
    x, w = _inputs(5, integer=True, b=4, k=k, n=k * TILES[kind])
    exact = np.asarray(x, np.int64) @ np.asarray(w, np.int64)
    for bidi in (False, True):
        f = _fn(case, kind, bidi, devices=jax.devices()[:n])
        np.testing.assert_array_equal(np.asarray(f(x, w)), exact)
        want = (n - 1 if not bidi else 2 * (n // 2)) * (2 * TILES[kind] if kind == "all_reduce" else 1)
        assert rc.trace_ppermutes(f.jitted, x, w).sends == want


@pytest.mark.parametrize("bidi", [False, True], ids=["one_way", "both_ways"])
def test_compiled_allgather_matmul_has_permutes_and_no_allgather(bidi):
    mesh_case = MESHES[0]
    f = _fn(mesh_case, "all_gather", bidi)
    x, w = _inputs()
    ops = hlo.collective_ops(hlo.compiled_hlo(f.jitted, x, w), {"X": 2, "Y": 4})
    kinds = {o.kind for o in ops}
    assert kinds == {"collective_permute"}, kinds
    assert "all_gather" not in kinds


def test_jit_baseline_gathers_instead():
    """The same product left to jax.jit: XLA gathers A over Y before one local matmul."""
    mesh = compat.make_mesh((2, 4), ("X", "Y"))
    lhs, rhs, out = cm.shardings("all_gather", "Y", "X")
    named = lambda s: jax.sharding.NamedSharding(mesh, s.spec)  # noqa: E731
    x, w = (placement.put(v, named(s)) for v, s in zip(_inputs(), (lhs, rhs)))
    baseline = jax.jit(lambda a, b: a @ b, out_shardings=named(out))
    ops = hlo.collective_ops(hlo.compiled_hlo(baseline, x, w), {"X": 2, "Y": 4})
    assert [(o.kind, o.axes) for o in ops] == [("all_gather", ("Y",))]


def test_block_sizes_match_the_cost_model():
    """Bytes in flight per device, read from the jaxpr, against the cost model's blocks."""
    x, w = _inputs()
    for kind in ("all_gather", "reduce_scatter"):
        for bidi in (False, True):
            f = _fn(MESHES[0], kind, bidi)
            traced = rc.trace_ppermutes(f.jitted, x, w)
            cost = cm.collective_matmul_cost(kind, B, K, N, 4, hardware.TPU_V5E, batch_shards=2,
                                             bidirectional=bidi, dtype_bytes=4)
            assert traced.bytes_sent == 3 * cost.block_bytes  # N - 1 blocks either way
            assert traced.max_message_bytes == cost.block_bytes
            assert len(cost.rounds) == traced.steps + 1  # a product after the last hop (or before the first)


def test_bad_inputs_give_clear_errors():
    mesh = compat.make_mesh((2, 4), ("X", "Y"))
    f = cm.on_mesh(mesh, "all_gather", "Y", "X")
    with pytest.raises(ValueError, match="4 devices .* size 6, which 4 does not divide"):
        f(jnp.ones((8, 6)), jnp.ones((6, 32)))
    with pytest.raises(ValueError, match="does not divide"):  # F of W not a multiple of Y
        f(jnp.ones((8, 16)), jnp.ones((16, 30)))
    with pytest.raises(ValueError, match="matching K"):
        f(jnp.ones((8, 16)), jnp.ones((12, 32)))
    with pytest.raises(ValueError, match="ring_axis 'Z' is not an axis of the mesh"):
        cm.on_mesh(mesh, "all_gather", "Z", "X")
    with pytest.raises(ValueError, match="kind must be one of"):
        cm.on_mesh(mesh, "all_to_all", "Y", "X")
    with pytest.raises(ValueError, match="both 'Y'"):
        cm.on_mesh(mesh, "all_gather", "Y", "Y")
    with pytest.raises(ValueError, match="odd"):  # the opposite block split in halves: 4 / 4 = 1 column
        cm.on_mesh(mesh, "all_gather", "Y", "X", bidirectional=True)(jnp.ones((8, 4)), jnp.ones((4, 8)))
    with pytest.raises(ValueError, match="num_tiles"):
        cm.on_mesh(mesh, "all_reduce", "Y", "X", num_tiles=3)(jnp.ones((8, 16)), jnp.ones((16, 32)))
    lhs, rhs, out = cm.shardings("all_gather", "Y", "X")
    inner = compat.shard_map(lambda a, b: cm.allgather_matmul(a, b, "Z"), mesh=mesh,
                             in_specs=(lhs.spec, rhs.spec), out_specs=out.spec)
    put = lambda v, s: placement.put(v, jax.sharding.NamedSharding(mesh, s.spec))  # noqa: E731
    with pytest.raises(ValueError, match="axis 'Z' is not an axis of the enclosing shard_map"):
        jax.jit(inner)(put(jnp.ones((8, 16)), lhs), put(jnp.ones((16, 32)), rhs))


# ------------------------------------------------------------------ cost model

V5E = hardware.TPU_V5E


def test_hiding_width_splits_hidden_from_exposed():
    """A chunk [B/X, D/Y] . [D/Y, F/Y] outlasts its block exactly when F/Y reaches the hiding width."""
    width = cm.hiding_width(V5E)  # 2 bytes x 1.97e14 / (2 x 4.5e10) = 4378 columns
    assert width == pytest.approx(2 * V5E.bf16_flops_per_s / (2 * V5E.ici_one_way_bytes_per_s))
    y = 4
    for f_local, hidden in ((4480, True), (4224, False)):  # just above and just below
        c = cm.collective_matmul_cost("all_gather", 1024, 8192, f_local * y, y, V5E, batch_shards=2)
        assert c.chunk_s == pytest.approx(2 * 512 * 2048 * f_local / V5E.bf16_flops_per_s)
        assert c.block_s == pytest.approx(512 * 2048 * 2 / V5E.ici_one_way_bytes_per_s)
        assert c.hidden is hidden and (c.chunk_s >= c.block_s) is hidden
        # one way: N - 1 rounds of max(chunk, block), then the last chunk
        assert c.overlapped_s == pytest.approx((y - 1) * max(c.chunk_s, c.block_s) + c.chunk_s)
        assert c.serial_s == pytest.approx(y * c.chunk_s + (y - 1) * c.block_s)
        assert c.compute_s == pytest.approx(y * c.chunk_s)


def _same_rounds(got, want):
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-12)


def test_rounds_both_ways_and_scatter_mirror():
    c = cm.collective_matmul_cost("all_gather", 64, 4096, 4096, 4, V5E, bidirectional=True)
    t, k = c.block_s, c.chunk_s
    # own chunk while the first blocks leave; two chunks while the halves of the opposite block fly
    _same_rounds(c.rounds, ((k, t), (2 * k, t / 2), (k, 0.0)))
    assert c.comms_s == pytest.approx(1.5 * t)  # per link direction: (N - 1) / 2 blocks
    odd = cm.collective_matmul_cost("all_gather", 64, 4096, 4096, 5, V5E, bidirectional=True)
    assert len(odd.rounds) == 3 and odd.compute_s == pytest.approx(5 * odd.chunk_s)
    rs = cm.collective_matmul_cost("reduce_scatter", 64, 4096, 4096, 4, V5E, bidirectional=True)
    _same_rounds(rs.rounds, c.rounds[::-1])
    ar = cm.collective_matmul_cost("all_reduce", 64, 4096, 4096, 4, V5E)
    _same_rounds(ar.rounds[:4], cm.collective_matmul_cost("reduce_scatter", 64, 4096, 4096, 4, V5E).rounds)
    _same_rounds(ar.rounds[4:], ((0.0, ar.block_s),) * 3)  # the gather has nothing to hide under
    assert not ar.hidden
    single = cm.collective_matmul_cost("all_gather", 8, 8, 8, 1, V5E, bidirectional=True)
    assert single.rounds == ((single.chunk_s, 0.0),)  # one device: one product, nothing to send
    with pytest.raises(ValueError, match="axis_size must be a positive int"):
        cm.collective_matmul_cost("all_gather", 8, 8, 8, 0, V5E)
