import math

import pytest

from scalelib import collectives as cc
from scalelib import hardware as hw
from scalelib.inference import model_parallel as mp
from scalelib.topology import ring_axis

V5E = hw.TPU_V5E
W = V5E.ici_bidi_bytes_per_s


def test_beta_and_max_ways():
    assert mp.hbm_over_ici(V5E) == pytest.approx(9.0)
    assert mp.max_generate_model_ways(16_384, 32, 8) == 64
    with pytest.raises(ValueError, match="batch must be a positive finite number"):
        mp.max_generate_model_ways(16_384, 0, 8)


def test_generate_matmul_times_and_the_ici_limit():
    b, d, f = 64, 8192, 28_672
    limit = mp.max_generate_model_ways(f, b, mp.hbm_over_ici(V5E))  # ~49.8 ways
    below = mp.generate_matmul_time(b, d, f, 32, V5E)
    above = mp.generate_matmul_time(b, d, f, 64, V5E)
    assert below.ici_s == pytest.approx(2 * b * d / W)
    assert below.hbm_s == pytest.approx(2 * d * f / (32 * V5E.hbm_bytes_per_s))
    assert below.math_s == pytest.approx(2 * b * d * f / (32 * V5E.bf16_flops_per_s))
    assert 32 < limit < 64
    assert below.bound == "hbm" and above.bound == "ici"
    assert below.time_s == below.hbm_s
    assert mp.generate_matmul_time(b, d, f, 1, V5E).ici_s == 0.0
    with pytest.raises(ValueError, match="ways must be a positive int"):
        mp.generate_matmul_time(b, d, f, 0, V5E)


def test_weight_share_and_layer_collectives():
    assert mp.weight_bytes_per_chip(140e9, 16) == 8.75e9
    with pytest.raises(ValueError, match="ways must be a positive int"):
        mp.weight_bytes_per_chip(140e9, 1.5)
    axis = ring_axis(V5E, 8)
    per_layer = mp.megatron_layer_comms_s(16, 8192, axis, act_bytes=1)
    one = cc.all_reduce(16 * 8192, axis)
    assert per_layer == pytest.approx(2 * one.total_s)
    assert one.bound == "latency"  # Appendix C: 131 kB of int8 activations is under the 360 kB line
    assert mp.kv_batch_sharding_all_to_alls_s(16, 64, 128, axis) > 0


def test_latency_bound_line_is_where_bandwidth_and_hop_latency_meet():
    axis = ring_axis(V5E, 8)
    line = mp.latency_bound_buffer_bytes(axis)
    assert line == pytest.approx(8 * V5E.ici_one_way_bytes_per_s * V5E.ici_hop_latency_s)
    assert cc.all_gather(0.5 * line, axis).bound == "latency"
    assert cc.all_gather(2 * line, axis).bound == "bandwidth"
    assert mp.min_latency_bound_ways(16, 8192, V5E, act_bytes=1) == pytest.approx(16 * 8192 / 45_000)


def test_two_d_weight_stationary_closed_form_matches_the_collectives():
    b, d, f = 32, 1024, 4096  # F = 4D
    n = 128
    x = mp.two_d_ws_optimal_x(n, f / d)
    assert x == 4
    yz = (ring_axis(V5E, 4), ring_axis(V5E, 8))
    t2 = mp.two_d_ws_comms_s(b, d, f, ring_axis(V5E, 4), yz)
    assert t2 == pytest.approx(mp.two_d_ws_comms_coefficient(4) * b * d / (W * math.sqrt(n)))
    # any other split over D is slower
    for other_x, other_yz in ((2, (8, 8)), (8, (4, 4))):
        t = mp.two_d_ws_comms_s(b, d, f, ring_axis(V5E, other_x), tuple(ring_axis(V5E, s) for s in other_yz))
        assert t > t2
    t1 = mp.one_d_ws_comms_s(b, d, (ring_axis(V5E, 4), ring_axis(V5E, 4), ring_axis(V5E, 8)))
    assert t1 == pytest.approx(mp.one_d_ws_comms_coefficient(3) * b * d / W)


def test_two_d_wins_past_the_crossover():
    n_star = mp.two_d_ws_crossover_chips(4, n_axes_1d=3)
    assert n_star == pytest.approx(72)
    c2, c1 = mp.two_d_ws_comms_coefficient(4), mp.one_d_ws_comms_coefficient(3)
    assert c2 / math.sqrt(64) > c1 > c2 / math.sqrt(128)
    with pytest.raises(ValueError, match="f_over_d must be a positive"):
        mp.two_d_ws_comms_coefficient(0)
    with pytest.raises(ValueError, match="n_axes must be a positive int"):
        mp.one_d_ws_comms_coefficient(0)
