"""GPU collective costs (scalelib.gpus.comm_costs) against the book's closed forms and limits."""

import pytest
from hypothesis import given, settings, strategies as st

from scalelib.gpus import comm_costs as cc
from scalelib.gpus import fabric as fb

NODE, POD = fb.H100_NODE, fb.H100_SUPERPOD
W = NODE.gpu_egress_bytes_per_s


def test_ring_all_gather_and_its_approximation():
    b = 512 * 2**20
    assert cc.ring_all_gather_s(b, 8, W) == pytest.approx(b * 7 / 8 / W)
    assert cc.ring_all_gather_s(b, 8, W, exact=False) == b / W
    assert cc.ring_all_gather_s(b, 1, W) == 0.0


def test_all_reduce_is_twice_the_ring_unless_sharp():
    b = 1e9
    assert cc.all_reduce_s(b, 8, W) == 2 * cc.ring_all_gather_s(b, 8, W)
    assert cc.all_reduce_s(b, 8, W, sharp=True) == b / W
    # SHARP's promised gain over the ring on 8 GPUs: 75 %
    assert cc.all_reduce_s(b, 8, W) / cc.all_reduce_s(b, 8, W, sharp=True) - 1 == pytest.approx(
        cc.sharp_predicted_gain(8))


def test_all_to_all_inside_a_node_and_across_nodes():
    b = 1e9
    assert cc.all_to_all_s(b, 8, W) == pytest.approx(b * 7 / (64 * W))
    assert cc.all_to_all_s(b, 8, W, k=4) == pytest.approx(cc.all_to_all_s(b, 8, W) / 2)
    assert cc.all_to_all_s(b, 8, W, k=16) == cc.all_to_all_s(b, 8, W)  # k past n: no saving
    across = cc.cross_node_all_to_all_s(b, 2, NODE.egress_bytes_per_s, exact=False)
    assert across / cc.all_to_all_s(b, 8, W, exact=False) == pytest.approx(4.5)


def test_expected_distinct_fraction_is_below_the_top_k_share():
    assert cc.expected_distinct_fraction(4, 8) == pytest.approx(0.3621, rel=1e-3)
    for k in (1, 2, 4, 8, 32):
        assert cc.expected_distinct_fraction(k, 8) <= min(k / 8, 7 / 8)


def test_tree_bandwidth_is_set_by_its_slowest_level():
    assert cc.tree_collective_bytes_per_s(POD.levels()) == POD.levels()[1].collective_bytes_per_s
    assert cc.tree_all_gather_s(1e9, POD.levels()) == pytest.approx(1e9 / 412.9e9, rel=1e-3)
    # two nodes: the node level (514 GB/s) is slower than the 2-way leaf ring (800 GB/s)
    two = [POD.levels()[0], fb.TreeLevel("2 nodes", 16, 2, NODE.egress_bytes_per_s, 0, 0)]
    assert cc.tree_collective_bytes_per_s(two) == POD.levels()[0].collective_bytes_per_s
    assert cc.hierarchical_all_gather_s(1e9, NODE) == 1e9 / NODE.egress_bytes_per_s
    with pytest.raises(ValueError, match="levels is empty"):
        cc.tree_collective_bytes_per_s([])


def test_sharding_the_inner_axis_helps_only_once_it_spans_nodes():
    b = 2 * 8192 * 32768
    one = cc.sharded_reduction(b, 1, NODE)
    eight = cc.sharded_reduction(b, 8, NODE)
    sixteen = cc.sharded_reduction(b, 16, NODE)
    assert eight.node_s == one.node_s / 8 and eight.scale_out_s == one.scale_out_s
    assert eight.total_s == one.total_s  # free but no faster
    assert sixteen.scale_out_s == one.scale_out_s / 2 and sixteen.total_s < one.total_s


def test_switch_byte_accounting():
    node, top = cc.su_all_gather_switch_bytes(32, 8)
    assert (node.ingress, node.egress) == pytest.approx((1, 8))
    assert (top.ingress, top.egress) == pytest.approx((1, 31))
    sharp = cc.sharp_all_reduce_switch_bytes(8)
    assert sharp.ingress == sharp.egress == 8


def test_nccl_bus_bandwidth_and_gains():
    assert cc.nccl_bus_bytes_per_s(100e9, 8) == pytest.approx(175e9)
    assert cc.with_gain(370e9, 0.3) == pytest.approx(481e9)
    with pytest.raises(ValueError, match="gain"):
        cc.with_gain(1.0, -2.0)


@settings(max_examples=40, deadline=None)
@given(st.floats(1.0, 1e12), st.integers(2, 128))
def test_costs_grow_with_bytes_and_never_beat_one_pass(num_bytes, n):
    assert cc.ring_all_gather_s(num_bytes, n, W) <= cc.ring_all_gather_s(num_bytes, n, W, exact=False)
    assert cc.all_reduce_s(num_bytes, n, W, sharp=True) <= cc.all_reduce_s(num_bytes, n, W) * n / (n - 1)
    assert cc.ring_all_gather_s(2 * num_bytes, n, W) == pytest.approx(2 * cc.ring_all_gather_s(num_bytes, n, W))


@pytest.mark.parametrize("call, message", [
    (lambda: cc.ring_all_gather_s(-1, 8, W), "num_bytes"),
    (lambda: cc.ring_all_gather_s(1, 0, W), "n must be a positive int"),
    (lambda: cc.all_to_all_s(1, 8, 0.0), "link_bytes_per_s"),
    (lambda: cc.all_to_all_s(1, 8, W, k=0), "k must be"),
    (lambda: cc.sharded_reduction(1, 2.5, NODE), "y must be"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
