"""Cost model of the collectives (scalelib.collectives) against the book's conventions."""

import pytest
from hypothesis import given, settings, strategies as st

from scalelib import collectives as cc
from scalelib import hardware as hw
from scalelib.topology import GpuNode, Slice, ring_axis

OPS = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]
V5E, V4P = hw.TPU_V5E, hw.TPU_V4P
sizes = st.integers(1, 64)
volumes = st.floats(1.0, 1e12)


def test_book_forms_with_a_wraparound():
    axis = ring_axis(V5E, 16)
    v = 3.2e7
    assert cc.all_gather(v, axis).bandwidth_s == pytest.approx(v / V5E.ici_bidi_bytes_per_s)
    assert cc.reduce_scatter(v, axis).bandwidth_s == pytest.approx(v / V5E.ici_bidi_bytes_per_s)
    assert cc.all_reduce(v, axis).bandwidth_s == pytest.approx(2 * v / V5E.ici_bidi_bytes_per_s)
    assert cc.all_to_all(v, axis).bandwidth_s == pytest.approx(v / 4 / V5E.ici_bidi_bytes_per_s)
    two = Slice(V4P, (4, 4, 4)).axes(0, 1)
    assert cc.all_gather(v, two).bandwidth_s == pytest.approx(v / (2 * V4P.ici_bidi_bytes_per_s))


def test_book_forms_without_a_wraparound():
    axis = Slice(V5E, (8, 4)).axis(1)  # v5e axis shorter than 16: a line
    assert not axis.wraparound
    v = 3.2e7
    ag = cc.all_gather(v, axis)
    assert ag.bidirectional == (False,)
    assert ag.bandwidth_s == pytest.approx(3 * (v / 4) / V5E.ici_one_way_bytes_per_s)
    assert ag.ring_steps == 3 and ag.latency_s == pytest.approx(3 * V5E.ici_hop_latency_s)
    assert cc.all_to_all(v, axis).bandwidth_s == pytest.approx(ag.bandwidth_s / 2)
    with pytest.raises(ValueError, match="no wraparound"):
        cc.all_gather(v, axis, bidirectional=True)


@settings(max_examples=200, deadline=None)
@given(n=sizes, v=volumes)
def test_gather_scatter_counts(n, v):
    axis = ring_axis(V5E, n)
    one, both = cc.all_gather(v, axis, False), cc.all_gather(v, axis, True)
    # every device sends every other shard once, whichever way it goes
    assert one.bytes_sent_per_device == pytest.approx(v * (n - 1) / n)
    assert both.bytes_sent_per_device == pytest.approx(v * (n - 1) / n)
    assert (one.ring_steps, both.ring_steps) == (n - 1, n // 2)
    # both directions halve the busiest link exactly, and the book's form bounds the real ring
    assert both.ring_bandwidth_s * 2 == pytest.approx(one.ring_bandwidth_s)
    assert one.ring_bandwidth_s == pytest.approx(one.bandwidth_s)
    assert both.ring_bandwidth_s == pytest.approx(both.bandwidth_s * (n - 1) / n)
    rs = cc.reduce_scatter(v, axis, True)
    assert (rs.counts, rs.bandwidth_s) == (both.counts, both.bandwidth_s)
    ar = cc.all_reduce(v, axis, True)
    assert ar.ring_steps == 2 * rs.ring_steps
    assert ar.bytes_sent_per_device == pytest.approx(2 * rs.bytes_sent_per_device)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(2, 64), v=volumes)
def test_all_to_all_counts(n, v):
    axis = ring_axis(V5E, n)
    one, both = cc.all_to_all(v, axis, False), cc.all_to_all(v, axis, True)
    gather = cc.all_gather(v, axis, False)
    assert one.bytes_sent_per_device == pytest.approx(gather.bytes_sent_per_device / 2)  # Exercise 3.10
    if n % 2 == 0:  # the book's footnote: N^2 / 4 chunks of V / N^2
        assert both.bytes_sent_per_device == pytest.approx(v / 4)
    assert both.ring_steps == n // 2
    # the busier direction carries (N + 2) / (2N) of the traffic, not exactly half
    m = n // 2
    assert both.counts.busiest_link_bytes == pytest.approx(v / n**2 * m * (m + 1) / 2)


@settings(max_examples=100, deadline=None)
@given(op=st.sampled_from(OPS), shape=st.lists(st.tuples(st.integers(1, 8), st.booleans()), min_size=1, max_size=3),
       v=volumes)
def test_several_axes(op, shape, v):
    axes = [ring_axis(V4P, n, wrap) for n, wrap in shape]
    cost = cc.collective(op, v, axes)
    total = 1
    for n, _ in shape:
        total *= n
    # the axes share the load: their rates add up (n_axes x the bandwidth for equal axes)
    rates = [1 / cc.collective(op, v, a).bandwidth_s for a in axes if a.size > 1]
    assert cost.bandwidth_s == pytest.approx(1 / sum(rates) if rates else 0.0)
    if len({(n, w) for n, w in shape}) == 1 and shape[0][0] > 1:
        assert cost.bandwidth_s == pytest.approx(cc.collective(op, v, axes[0]).bandwidth_s / len(axes))
    assert cost.ring_steps == sum(cc.axis_counts(op, a.size, b, 1.0).steps for a, b in zip(axes, cost.bidirectional))
    assert cost.latency_s == pytest.approx(cost.ring_steps * V4P.ici_hop_latency_s)
    if op in ("all_gather", "reduce_scatter"):
        assert cost.bytes_sent_per_device == pytest.approx(v * (1 - 1 / total))
    assert cost.total_s == max(cost.bandwidth_s, cost.latency_s)


def test_latency_regime():
    axis = ring_axis(V4P, 4)
    tiny, big = cc.all_gather(256, axis), cc.all_gather(1e9, axis)
    assert tiny.bound == "latency" and tiny.total_s == pytest.approx(2e-6)
    assert big.bound == "bandwidth"
    assert cc.latency_bound_bytes(ring_axis(V5E, 4)) == pytest.approx(
        V5E.ici_one_way_bytes_per_s * V5E.ici_hop_latency_s)
    assert tiny.step_bandwidth_s < V4P.ici_hop_latency_s


def test_gpu_ring_gains_nothing_from_both_directions():
    axis = GpuNode(hw.H100).axis()
    one, both = cc.all_gather(1e9, axis, False), cc.all_gather(1e9, axis, True)
    assert both.ring_bandwidth_s == pytest.approx(one.ring_bandwidth_s)


def test_point_to_point_exercise_2_5_pattern():
    sl = Slice(V5E, (4, 4))
    t = cc.point_to_point(sl, (0, 0), (3, 3), 1.6e7)
    assert (t.hops, t.ports) == (6, 2)
    assert t.bytes_per_s == 2 * V5E.ici_one_way_bytes_per_s
    assert t.first_byte_s == pytest.approx(6 * V5E.ici_hop_latency_s)
    assert t.total_s == pytest.approx(t.first_byte_s + 1.6e7 / t.bytes_per_s)
    assert cc.point_to_point(sl, (1, 1), (1, 1), 5.0).total_s == 0.0
    assert cc.gather_to_one_s(sl, (0, 0), 16e9) == pytest.approx(15e9 / (2 * V5E.ici_one_way_bytes_per_s))


@pytest.mark.parametrize("call, match", [
    (lambda: cc.collective("broadcast", 1.0, ring_axis(V5E, 4)), "op must be"),
    (lambda: cc.all_gather(-1.0, ring_axis(V5E, 4)), "array_bytes"),
    (lambda: cc.all_gather(1.0, []), "non-empty"),
    (lambda: cc.point_to_point(Slice(V5E, (4, 4)), (0, 0), (1, 1), float("nan")), "num_bytes"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
