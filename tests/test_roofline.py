import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scalelib import hardware as hw
from scalelib import roofline as rl

pos = st.floats(min_value=1e-3, max_value=1e18, allow_nan=False, allow_infinity=False)
dims = st.integers(min_value=1, max_value=100_000)


@given(pos, pos, pos, pos)
def test_bounds_bracket_and_bound_label(flops, nbytes, fps, bps):
    t = rl.roofline_time(flops, nbytes, fps, bps)
    assert t.lower_bound_s <= t.upper_bound_s <= 2 * t.lower_bound_s * (1 + 1e-12)
    assert (t.bound == "compute") == (t.compute_s >= t.comms_s)
    # compute-bound exactly when the op's intensity reaches the channel's critical intensity
    assert (rl.arithmetic_intensity(flops, nbytes) >= rl.critical_intensity(fps, bps)) == (t.compute_s >= t.comms_s) or \
        math.isclose(t.compute_s, t.comms_s, rel_tol=1e-9)


@given(dims, dims, dims)
def test_matmul_cost_counts(b, d, f):
    c = rl.matmul_cost(b, d, f)
    assert c.flops == 2 * b * d * f
    assert c.bytes == 2 * (b * d + d * f + b * f)


@given(dims, dims)
def test_matmul_intensity_is_below_batch(d, f):
    b = 16
    assert rl.matmul_cost(b, d, f).intensity < b


def test_dot_product_intensity_tends_to_half():
    assert rl.einsum_cost("n,n->", {"n": 10**9}, 2).intensity == pytest.approx(0.5, rel=1e-6)


def test_einsum_mixed_dtypes_and_errors():
    c = rl.einsum_cost("bd,df->bf", {"b": 2, "d": 3, "f": 4}, {"bd": 2, "df": 1, "bf": 2})
    assert c.bytes == 2 * 6 + 12 + 2 * 8
    with pytest.raises(ValueError, match="no entry for index"):
        rl.einsum_cost("bd,df->bf", {"b": 2, "d": 3}, 2)
    with pytest.raises(ValueError, match="must look like"):
        rl.einsum_cost("bd df bf", {"b": 1}, 2)
    with pytest.raises(ValueError, match="no input has"):
        rl.einsum_cost("bd->bz", {"b": 1, "d": 1, "z": 1}, 2)


@given(st.floats(1e12, 1e16), st.floats(1e10, 1e13), st.integers(256, 65536), st.integers(256, 65536))
def test_exact_critical_batch_is_where_times_cross(fps, bps, d, f):
    b_star = rl.matmul_critical_batch(fps, bps, weight_bytes=2, d=d, f=f)
    if math.isinf(b_star):
        return
    t = rl.op_time_on_chip(rl.matmul_cost(1, d, f), hw.TPU_V5E)  # smoke: callable on a chip
    assert t.upper_bound_s > 0
    cost = rl.matmul_cost(b_star, d, f)
    assert rl.compute_time_s(cost.flops, fps) == pytest.approx(rl.comms_time_s(cost.bytes, bps), rel=1e-6)


def test_limit_critical_batch_for_precisions():
    v5e = hw.TPU_V5E
    bf16 = rl.chip_matmul_critical_batch(v5e, "bf16", 2)
    assert bf16 == pytest.approx(rl.chip_critical_intensity(v5e))
    assert rl.chip_matmul_critical_batch(v5e, "bf16", 1) == pytest.approx(bf16 / 2)
    with pytest.raises(ValueError, match="both d and f"):
        rl.matmul_critical_batch(1e14, 1e12, d=10)


def test_two_chip_threshold_is_in_d():
    fps, link = hw.TPU_V5E.bf16_flops_per_s, hw.TPU_V5E.ici_one_way_bytes_per_s
    d_star = rl.two_chip_critical_d(fps, link)
    for batch in (1, 64, 4096):
        t = rl.two_chip_contracting_matmul(batch, d_star, 4096, fps, link)
        assert t.compute_s == pytest.approx(t.comms_s, rel=1e-9)
        assert rl.two_chip_contracting_matmul(batch, 2 * d_star, 4096, fps, link).bound == "compute"


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="flops_per_s must be a positive"):
        rl.compute_time_s(1.0, 0.0)
    with pytest.raises(ValueError, match="num_bytes must be >= 0"):
        rl.comms_time_s(-1, 1.0)
    with pytest.raises(ValueError, match="non-negative integers"):
        rl.array_bytes((2, 2.5), 2)


def test_attainable_is_min_of_ceilings():
    assert rl.attainable_flops_per_s(1.0, 100.0, 10.0) == 10.0
    assert rl.attainable_flops_per_s(1e3, 100.0, 10.0) == 100.0
