"""Section 9 helpers: tiled layouts, sharded-einsum estimates against XLA, timing, program summaries."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import collectives, compat, hardware, placement, profiling
from scalelib.topology import RingAxis, ring_axis
from tests.conftest import XLA_DEFAULT_FUSION

# ------------------------------------------------------------------ layouts


def test_padding_of_a_small_tiled_array():
    assert profiling.padded_shape((3, 5), (2, 2)) == (4, 6)
    assert profiling.padding_ratio((3, 5), (2, 2)) == pytest.approx(24 / 15)
    assert profiling.padding_ratio((1, 128), (8, 128)) == 8.0  # one row fills 1/8 of an (8, 128) tile
    assert profiling.padding_ratio((4, 256), [(8, 128), (2, 1)]) == 2.0  # inner tile divides the outer one
    assert profiling.padding_ratio((7,), (8, 128)) == pytest.approx(1024 / 7)  # a vector takes a whole tile
    assert profiling.padded_shape((2, 16, 100), (8, 128)) == (2, 16, 128)  # only the minor dims are tiled


def test_parse_hlo_layouts():
    big = profiling.parse_layout("bf16[32,32,8192]{2,1,0:T(8,128)(2,1)S(1)}")
    assert big.tiles == ((8, 128), (2, 1)) and big.memory == "VMEM" and big.memory_space == 1
    assert big.padding_ratio == 1.0 and big.bytes == big.padded_bytes == 2 * 32 * 32 * 8192
    small = profiling.parse_layout("f32[3,5]{1,0:T(2,2)}")
    assert small.padded_shape == (4, 6) and small.padding_ratio == pytest.approx(1.6) and small.memory == "HBM"
    col = profiling.parse_layout("f32[128,3]{0,1:T(8,128)}")  # dim 0 is minor: stored as [3, 128]
    assert col.physical_shape == (3, 128) and col.padded_shape == (8, 128)
    plain = profiling.parse_layout("f32[128,256]{1,0}")  # what the CPU backend prints: no tiles
    assert plain.tiles == () and plain.padding_ratio == 1.0
    for bad in ("x[3]", "f32[3,5]{0,0}", "f32(3)"):
        with pytest.raises(ValueError, match="HLO array type|permutation"):
            profiling.parse_layout(bad)


def test_tiled_offsets_follow_tiles_then_inner_tiles():
    # bf16[4, 8] in (2, 4) tiles holding (2, 1) tiles: each pair of rows is packed column by column
    got = profiling.tiled_offsets((4, 8), [(2, 4), (2, 1)])
    want = np.array([[0, 2, 4, 6, 8, 10, 12, 14], [1, 3, 5, 7, 9, 11, 13, 15],
                     [16, 18, 20, 22, 24, 26, 28, 30], [17, 19, 21, 23, 25, 27, 29, 31]])
    np.testing.assert_array_equal(got, want)
    padded = profiling.tiled_offsets((3, 5), [(2, 2)])  # a [4, 6] buffer holds 15 elements
    assert sorted(padded.ravel()) == sorted(set(padded.ravel())) and padded.max() < 24
    np.testing.assert_array_equal(profiling.tiled_offsets((2, 3), []), np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match=r"tile \[0, 2\]: entry 0 must be a positive int, got 0"):
        profiling.padding_ratio((3, 5), (0, 2))


# ------------------------------------------------------------------ sharded einsum estimates


def test_einsum_estimate_matches_xla_flops_per_device():
    """No communication: every device does 1/8 of the FLOPs, as XLA's cost analysis counts them."""
    sizes = {"B": 16, "T": 8, "D": 64, "F": 128}
    est = profiling.sharded_einsum_time("X[B_X, T, D]", "W[D, F_Y]", sizes, {"X": 4, "Y": 2}, 1e12)
    assert est.plan.collectives == () and est.comms_s == 0
    assert est.lhs_local_shape == (4, 8, 64) and est.rows_per_device == 32
    assert est.flops_per_device == 2 * 16 * 8 * 64 * 128 / 8
    assert est.time_s == est.compute_s == pytest.approx(est.flops_per_device / 1e12)
    mesh = compat.make_mesh((4, 2), ("X", "Y"), kind="auto")
    x = placement.put(jnp.ones((16, 8, 64)), NamedSharding(mesh, P("X")))
    w = placement.put(jnp.ones((64, 128)), NamedSharding(mesh, P(None, "Y")))
    f = jax.jit(lambda a, b: jnp.einsum("btd,df->btf", a, b), out_shardings=NamedSharding(mesh, P("X", None, "Y")),
                compiler_options=XLA_DEFAULT_FUSION)
    assert profiling.program_summary(f, x, w, mesh_shape={"X": 4, "Y": 2}).flops == est.flops_per_device


def test_einsum_estimate_prices_its_reduce_scatter():
    """Down-projection Tmp[B_X, T, F_Y] . W[F_Y, D] -> Out[B_X, T, D_Y]: one ReduceScatter over Y."""
    v5e = hardware.TPU_V5E
    sizes = {"B": 32, "T": 1024, "D": 8192, "F": 32768}
    axes = {"X": ring_axis(v5e, 4), "Y": ring_axis(v5e, 2)}
    est = profiling.sharded_einsum_time("Tmp[B_X, T, F_Y]", "W[F_Y, D]", sizes, axes, v5e, out="Out[B_X, T, D_Y]")
    (step,) = est.cost.steps
    assert (step.step.kind, step.step.axes) == ("reduce_scatter", ("Y",))
    assert step.array_bytes == 2 * 8 * 1024 * 8192  # the unreduced [B/X, T, D] partial sum, bf16
    assert est.comms_s == pytest.approx(collectives.reduce_scatter(step.array_bytes, axes["Y"]).total_s)
    assert est.compute_s == pytest.approx(2 * 32 * 1024 * 32768 * 8192 / 8 / v5e.bf16_flops_per_s)
    assert est.time_s == max(est.compute_s, est.comms_s)
    multi = profiling.sharded_einsum_time("X[B_X, T, D]", "Wq[D, N_Y, H]", {**sizes, "N": 32, "H": 256},
                                          {"X": 4, "Y": 2}, 1e12)  # heads sharded: Q[B_X, T, N_Y, H]
    assert str(multi.out) == "Out[B_X, T, N_Y, H]" and multi.flops_per_device == 2 * 32 * 1024 * 8192 * 32 * 256 / 8


def test_einsum_estimate_errors():
    sizes = {"B": 8, "D": 16, "F": 32}
    with pytest.raises(ValueError, match="no entry for dims"):
        profiling.sharded_einsum_time("X[B_X, D]", "W[D, G]", sizes, {"X": 2}, 1e12)
    with pytest.raises(ValueError, match="nothing is contracted"):
        profiling.sharded_einsum_time("X[B_X, D]", "W[F]", sizes, {"X": 2}, 1e12)
    with pytest.raises(ValueError, match="given only as a size"):  # a collective needs a bandwidth
        profiling.sharded_einsum_time("X[B, D_X]", "W[D_X, F]", sizes, {"X": 2}, 1e12)
    with pytest.raises(ValueError, match="which 3 does not divide"):
        profiling.sharded_einsum_time("X[B_X, D]", "W[D, F]", sizes, {"X": 3}, 1e12)
    axis = RingAxis(2, True, 1e10, 2e10, 0.0)
    est = profiling.sharded_einsum_time("X[B, D_X]", "W[D_X, F]", sizes, {"X": axis}, 1e12)
    assert est.plan.collectives == (("all_reduce", ("X",)),)


# ------------------------------------------------------------------ timing and program contents


def test_time_jitted_excludes_the_compile():
    f = jax.jit(lambda a: (a @ a).sum())
    x = jnp.ones((64, 64))
    t = profiling.time_jitted(f, x, runs=5)
    assert len(t.runs_s) == 5 and all(r > 0 for r in t.runs_s)
    assert t.min_s <= t.median_s <= max(t.runs_s)
    assert t.first_call_s > t.median_s  # the first call traced and compiled
    with pytest.raises(ValueError, match="runs must be a positive int, got 0"):
        profiling.time_jitted(f, x, runs=0)


def test_program_summary_lists_collectives_and_heaviest_op():
    mesh = compat.make_mesh((2, 4), ("a", "b"))
    body = compat.shard_map(lambda v, w: jax.lax.psum(v @ w, "b"), mesh=mesh, in_specs=(P("a", "b"), P("b", None)),
                            out_specs=P("a", None))
    x = placement.put(jnp.ones((8, 32)), NamedSharding(mesh, P("a", "b")))
    w = placement.put(jnp.ones((32, 16)), NamedSharding(mesh, P("b", None)))
    s = profiling.program_summary(jax.jit(body, compiler_options=XLA_DEFAULT_FUSION), x, w, mesh_shape={"a": 2, "b": 4},
                                  top=3)
    assert [(c.kind, c.axes) for c in s.collectives] == [("all_reduce", ("b",))]
    assert s.collective_kinds == {"all_reduce": 1}
    assert s.top_ops[0].flops == 2 * 4 * 8 * 16  # local [4, 8] . [8, 16]
    assert s.top_ops[0].flops <= s.flops
    with pytest.raises(ValueError, match="ENTRY"):
        profiling.hlo_ops("not hlo")


def test_jaxpr_primitive_counts_sees_inside_shard_map():
    mesh = compat.make_mesh((8,), ("x",))
    f = jax.jit(compat.shard_map(lambda v: jax.lax.psum(v * 2, "x"), mesh=mesh, in_specs=P("x"), out_specs=P()))
    counts = profiling.jaxpr_primitive_counts(f, placement.put(jnp.ones(8), NamedSharding(mesh, P("x"))))
    # with replication checking on, JAX traces psum as psum_invariant
    assert counts["psum"] + counts["psum_invariant"] == 1 and counts["mul"] == 1 and counts["shard_map"] == 1


def test_section_10_jit_example_compiles_to_one_all_reduce():
    """In[B_X, D_Y] . W[D_Y, F] -> Out[B_X, F] on a 2 x 2 mesh: a local matmul, then AllReduce over Y."""
    mesh = compat.make_mesh((2, 2), ("X", "Y"), kind="auto", devices=jax.devices()[:4])
    x = placement.put(jnp.zeros((8, 256), jnp.bfloat16), NamedSharding(mesh, P("X", "Y")))
    w = placement.put(jnp.zeros((256, 512), jnp.bfloat16), NamedSharding(mesh, P("Y", None)))
    f = jax.jit(lambda a, b: jnp.einsum("bd,df->bf", jnp.square(a), b), out_shardings=NamedSharding(mesh, P("X", None)),
                compiler_options=XLA_DEFAULT_FUSION)
    s = profiling.program_summary(f, x, w, mesh_shape={"X": 2, "Y": 2})
    assert [(c.kind, c.axes) for c in s.collectives] == [("all_reduce", ("Y",))]
    assert s.top_ops[0].flops == 2 * 4 * 128 * 512  # local In [4, 128] . W [128, 512]
