"""scalelib.sharded_matmul: the four cases of section 3.2, run, priced and compared with XLA."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scalelib import compat, topology
from scalelib import hardware as hw
from scalelib.sharded_matmul import (XLA_CHOICES, crossover, hlo_collectives, plan_cost, plan_matmul,
                                     ring_axes_of, run_plan, shards_at_balance, xla_choice_recorded,
                                     xla_collectives)
from scalelib.sharding import Sharding

RTOL = 1e-5  # f32 products of N(0, 1) entries, K <= 256, against a float64 reference
MESHES = [(2, 4), (4, 2)]
# (A, B, wanted C, strategy): every case of the book, each resharding step, and mixtures
CASES = [
    ("A[I_X, J]", "B[J, K_Y]", None, "gather"),  # case 1
    ("A[I, J_X]", "B[J, K]", None, "gather"),  # case 2, strategy 1
    ("A[I, J_X]", "B[J, K]", None, "reduce"),  # case 2, strategy 2 (Exercise 3.4)
    ("A[I, J_X]", "B[J_Y, K]", None, "gather"),  # contracting dims on different axes
    ("A[I, J_X]", "B[J_X, K]", None, "gather"),  # case 3, AllReduce
    ("A[I, J_X]", "B[J_X, K]", "C[I, K_X]", "gather"),  # case 3, ReduceScatter
    ("A[I, J_XY]", "B[J_XY, K]", "C[I_Y, K_X]", "gather"),  # two ReduceScatters
    ("A[I_X, J]", "B[J, K_X]", "C[I, K_X]", "gather"),  # case 4, gather A
    ("A[I_X, J]", "B[J, K_X]", "C[I_X, K]", "gather"),  # case 4, gather B
    ("A[I_X, J_Y]", "B[J_Y, K_X]", None, "gather"),  # cases 3 + 4
    ("A[I_X, J]", "B[J_X, K_Y]", None, "gather"),  # Exercise 3.6: data + tensor + FSDP
    ("A[I_X, J]", "B[J, K]", "C[I, K_X]", "gather"),  # AllToAll on the output
    ("A[I_XY, J]", "B[J, K]", "C[I_Y, K_X]", "gather"),  # gather then local slices
]
ONE_D = [c for c in CASES if "Y" not in "".join(x or "" for x in c[:3])]


def _data(shape_a=(16, 32), shape_b=(32, 24), seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape_a).astype(np.float32), rng.standard_normal(shape_b).astype(np.float32)


@pytest.mark.parametrize("a, b, out, want_cases", [
    ("A[I_X, J]", "B[J, K_Y]", None, (1,)),
    ("A[I, J_X]", "B[J, K]", None, (2,)),
    ("A[I, J_X]", "B[J_X, K]", None, (3,)),
    ("A[I_X, J]", "B[J, K_X]", None, (4,)),
    ("A[I_X, J_Y]", "B[J_Y, K_X]", None, (3, 4)),
])
def test_book_cases_are_recognised(a, b, out, want_cases):
    assert plan_matmul(a, b, out).cases == want_cases


def test_plans_use_the_books_collectives():
    assert plan_matmul("A[I_X, J]", "B[J, K_Y]").collectives == ()
    assert str(plan_matmul("A[I, J_X]", "B[J, K]").pre[0]) == "AllGather_X A[I, J_X] -> A[I, J]"
    rs = plan_matmul("A[I, J_X]", "B[J_X, K]", "C[I, K_X]").post[0]
    assert str(rs) == "ReduceScatter_X,K C[I, K]{U_X} -> C[I, K_X]"
    assert plan_matmul("A[I, J_X]", "B[J_X, K]").collectives == (("all_reduce", ("X",)),)
    # case 4: the operand gathered is the one the output does not keep sharded over X
    assert plan_matmul("A[I_X, J]", "B[J, K_X]", "C[I_X, K]").pre[0].before.name == "B"
    assert plan_matmul("A[I_X, J]", "B[J, K_X]", "C[I, K_X]").pre[0].before.name == "A"
    assert plan_matmul("A[I_X, J]", "B[J, K]", "C[I, K_X]").collectives == (("all_to_all", ("X",)),)


def test_planner_errors_say_what_to_do():
    with pytest.raises(ValueError, match="contracting dims must share a name"):
        plan_matmul("A[I, J]", "B[L, K]")
    with pytest.raises(ValueError, match="inputs must be reduced"):
        plan_matmul("A[I, J]{U_X}", "B[J, K]")
    with pytest.raises(ValueError, match="must have dims"):
        plan_matmul("A[I, J]", "B[J, K]", "C[K, I]")
    with pytest.raises(ValueError, match="does not divide"):
        run_plan(plan_matmul("A[I_X, J]", "B[J, K]"), *_data((6, 32)), compat.make_mesh((4, 2), ("X", "Y")))


@pytest.mark.parametrize("shape", MESHES)
@pytest.mark.parametrize("a, b, out, strategy", CASES)
def test_plan_runs_and_equals_the_unsharded_product(shape, a, b, out, strategy):
    mesh = compat.make_mesh(shape, ("X", "Y"))
    plan = plan_matmul(a, b, out, strategy=strategy)
    x, y = _data()
    c = run_plan(plan, x, y, mesh)
    assert c.sharding.spec == plan.out.spec
    np.testing.assert_allclose(np.asarray(c), x.astype(np.float64) @ y, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("a, b, out, strategy", ONE_D)
def test_plan_runs_on_a_ring_of_8(a, b, out, strategy):
    mesh = compat.make_mesh((8,), ("X",))
    x, y = _data((16, 64), (64, 32))
    c = run_plan(plan_matmul(a, b, out, strategy=strategy), x, y, mesh)
    np.testing.assert_allclose(np.asarray(c), x.astype(np.float64) @ y, rtol=RTOL, atol=RTOL)


@st.composite
def sharding_pair(draw):
    """Random A[I, J] and B[J, K] over mesh axes X, Y (each axis at most once per array)."""
    def one(dims):
        order = draw(st.permutations(("X", "Y")))
        owner = [draw(st.integers(-1, 1)) for _ in order]
        return Sharding(dims, tuple(tuple(x for x, o in zip(order, owner) if o == d) for d in range(2)))
    return one(("I", "J")), one(("J", "K")), draw(st.sampled_from(["gather", "reduce"]))


@settings(max_examples=12, deadline=None)
@given(sharding_pair())
def test_any_input_shardings_give_the_right_product(pair):
    a, b, strategy = pair
    mesh = compat.make_mesh((2, 4), ("X", "Y"))
    x, y = _data((16, 32), (32, 24), seed=1)
    c = run_plan(plan_matmul(a, b, strategy=strategy), x, y, mesh)
    np.testing.assert_allclose(np.asarray(c), x.astype(np.float64) @ y, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("shape, names", [((2, 4), ("X", "Y")), ((4, 2), ("X", "Y")), ((8,), ("X",))])
def test_xla_choice_is_the_plan_or_a_recorded_alternative(shape, names):
    mesh = compat.make_mesh(shape, names, kind="auto")
    cases = CASES if len(names) == 2 else ONE_D
    for a, b, out, strategy in cases:
        plan = plan_matmul(a, b, out, strategy=strategy)
        for sa, sb in (((64, 32), (32, 48)), ((16, 256), (256, 64))):
            seen = xla_collectives(plan, mesh, sa, sb)
            assert xla_choice_recorded(plan, seen), (plan.describe(), shape, sa, sb, seen)


def test_recorded_xla_choices_name_real_cases():
    for key, alternatives in XLA_CHOICES.items():
        a, rest = key.split(" . ")
        b, out = rest.split(" -> ")
        plan = plan_matmul(a, b, out)
        assert sorted(plan.collectives) == sorted(alternatives[0]), key  # book's choice listed first


def test_hlo_replica_group_forms():
    mesh = {"X": 2, "Y": 4}
    text = "\n".join([
        "%a = f32[8] all-gather(%p), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}",
        "%b = f32[8] all-reduce(%p), replica_groups=[4,2]<=[2,4]T(1,0), to_apply=%add",
        "%c = f32[8] all-reduce-start(%p), replica_groups=mesh['axis_0'=1,'axis_1'=2,'axis_2'=4] {'axis_1'}",
        "%d = f32[8] all-reduce-done(%c)",
        "%e = f32[8] all-gather(%p), replica_groups=mesh['axis_0'=4,'axis_1'=1,'axis_2'=2], "
        "device_ids=([2,4]T(1,0)) {'axis_0'}, dimensions={0}",
        "%f = f32[8] collective-permute(%p), source_target_pairs={{0,1},{1,0}}",
        "%g = f32[8] reduce-scatter(%p), replica_groups=[1,8]<=[8], dimensions={0}",
    ])
    assert hlo_collectives(text, mesh) == (
        ("all_gather", ("Y",)), ("all_reduce", ("X",)), ("all_reduce", ("X",)), ("all_gather", ("Y",)),
        ("collective_permute", None), ("reduce_scatter", ("X", "Y")))


# ---------------------------------------------------------------- cost (Exercise 3.4, TPU v5p)
V5P_RING = ring_axes_of(topology.Slice(hw.TPU_V5P, (4, 4, 4)), ("X", "Y", "Z"))


def _cost(plan, b, d=8192, f=32768):
    return plan_cost(plan, {"B": b, "D": d, "F": f}, V5P_RING, hw.TPU_V5P)


def test_case_costs_follow_section_3():
    s1 = plan_matmul("X[B, D]", "Y[D_X, F]")
    c1 = _cost(s1, 1024)
    assert c1.flops == 2 * 1024 * 8192 * 32768
    assert c1.compute_s == pytest.approx(2 * 1024 * 8192 * 32768 / hw.TPU_V5P.bf16_flops_per_s, rel=1e-12)
    # AllGather of Y[D, F] in bf16 over one wrapped axis: V / W_bidi
    assert c1.comms_s == pytest.approx(2 * 8192 * 32768 / hw.TPU_V5P.ici_bidi_bytes_per_s, rel=1e-12)
    s2 = plan_matmul("X[B, D]", "Y[D_X, F]", strategy="reduce")
    c2 = _cost(s2, 1024)
    assert c2.flops == c1.flops / 4
    assert c2.comms_s == pytest.approx(2 * 2 * 1024 * 32768 / hw.TPU_V5P.ici_bidi_bytes_per_s, rel=1e-12)
    assert _cost(plan_matmul("X[B_X, D]", "Y[D, F_Y]"), 1024).comms_s == 0.0


def test_exercise_3_4_thresholds():
    s1 = plan_matmul("X[B, D]", "Y[D_X, F]")
    s2 = plan_matmul("X[B, D]", "Y[D_X, F]", strategy="reduce")
    ratio = hw.TPU_V5P.bf16_flops_per_s / hw.TPU_V5P.ici_bidi_bytes_per_s  # 2550
    b_star = crossover(lambda b: _cost(s1, b).compute_s - _cost(s1, b).comms_s, 1, 1e7)
    assert b_star == pytest.approx(ratio, rel=1e-6)
    assert shards_at_balance(_cost(s2, 256), 4) == pytest.approx(8192 / (2 * ratio), rel=1e-9)
    d_star = crossover(lambda d: _cost(s1, 256, d).compute_s - _cost(s2, 256, d).comms_s, 1, 1e7)
    assert d_star == pytest.approx(2 * ratio, rel=1e-6)
    with pytest.raises(ValueError, match="same sign"):
        crossover(lambda b: 1.0, 1, 2)
