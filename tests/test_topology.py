"""Slices, hops, per-axis bandwidth, hosts and GPU nodes (scalelib.topology)."""

import itertools
from collections import deque

import pytest
from hypothesis import given, settings, strategies as st

from scalelib import hardware as hw
from scalelib.topology import GpuCluster, GpuNode, Slice, ring_axis


def _bfs_hops(sl: Slice, src, dst) -> int:
    """Shortest path by brute force over the ICI graph (neighbours only, wraparound where present)."""
    seen, queue = {src: 0}, deque([src])
    while queue:
        c = queue.popleft()
        for i, (n, wrap) in enumerate(zip(sl.shape, sl.wraparound)):
            for step in (-1, 1):
                j = c[i] + step
                if wrap:
                    j %= n
                if 0 <= j < n:
                    nxt = c[:i] + (j,) + c[i + 1:]
                    if nxt not in seen:
                        seen[nxt] = seen[c] + 1
                        queue.append(nxt)
    return seen[dst]


SLICES = st.sampled_from([
    Slice(hw.TPU_V5E, (4, 4)), Slice(hw.TPU_V5E, (16, 4)), Slice(hw.TPU_V5E, (16, 16)),
    Slice(hw.TPU_V5E, (8,)), Slice(hw.TPU_V4P, (4, 4, 4)), Slice(hw.TPU_V4P, (2, 2, 4)),
    Slice(hw.TPU_V5P, (4, 4, 8)), Slice(hw.TPU_V3, (32, 4)),
])


@settings(max_examples=60, deadline=None)
@given(sl=SLICES, data=st.data())
def test_hops_is_shortest_path(sl, data):
    coord = st.tuples(*(st.integers(0, n - 1) for n in sl.shape))
    a, b, c = data.draw(coord), data.draw(coord), data.draw(coord)
    assert sl.hops(a, b) == _bfs_hops(sl, a, b)
    assert sl.hops(a, b) == sl.hops(b, a)
    assert sl.hops(a, c) <= sl.hops(a, b) + sl.hops(b, c)
    assert sl.hops(a, b) <= sl.diameter_hops
    assert 1 <= sl.ports_towards(a, b) <= 2 * sl.ndim or a == b


def test_wraparound_rules():
    assert Slice(hw.TPU_V4P, (4, 4, 4)).kind == "torus"
    assert Slice(hw.TPU_V4P, (2, 2, 4)).kind == "mesh"  # not a whole cube: no optical wraps
    assert Slice(hw.TPU_V5E, (8, 16)).wraparound == (False, True)
    assert Slice(hw.TPU_V5E, (8, 16)).kind == "partial torus"
    assert Slice(hw.TPU_V5E, (16, 16)).kind == "torus"
    assert Slice(hw.TPU_V3, (32, 32)).kind == "torus"


def test_exercise_2_5_corner_to_corner():
    sl = Slice(hw.TPU_V5E, (4, 4))
    assert sl.hops((0, 0), (3, 3)) == 6
    assert sl.ports_towards((0, 0), (3, 3)) == 2
    assert Slice(hw.TPU_V5E, (16, 16)).hops((0, 0), (15, 15)) == 2  # wraparounds make it 2


def test_links_at_corners_and_on_a_torus():
    mesh, torus = Slice(hw.TPU_V5E, (4, 4)), Slice(hw.TPU_V5E, (16, 16))
    assert mesh.links_at((0, 0)) == 2 and mesh.links_at((0, 1)) == 3 and mesh.links_at((1, 2)) == 4
    assert all(torus.links_at(c) == 4 for c in [(0, 0), (15, 3), (7, 7)])
    assert Slice(hw.TPU_V4P, (4, 4, 4)).links_at((0, 0, 0)) == hw.TPU_V4P.ici_links
    opposite = torus.ports_towards((0, 0), (8, 0))
    assert opposite == 2  # both ways round the ring are equally short


@pytest.mark.parametrize("chip", [c for c in hw.CHIPS.values() if c.family == "tpu"], ids=lambda c: c.name)
def test_axis_bandwidth_comes_from_hardware(chip):
    sl = Slice(chip, (4, 4))
    assert sl.axis_one_way_bytes_per_s(0) == chip.ici_one_way_bytes_per_s
    assert sl.axis_bidi_bytes_per_s(1) == 2 * chip.ici_one_way_bytes_per_s
    ax = sl.axis(1)
    assert (ax.size, ax.one_way_bytes_per_s, ax.bidi_bytes_per_s, ax.hop_latency_s) == (
        4, chip.ici_one_way_bytes_per_s, chip.ici_bidi_bytes_per_s, chip.ici_hop_latency_s)
    assert ring_axis(chip, 8).wraparound and not ring_axis(chip, 8, wraparound=False).wraparound


def test_hosts_pcie_and_dcn():
    v5e = Slice(hw.TPU_V5E, (4, 4))
    assert v5e.num_hosts == 2 and v5e.chips_per_host == 8
    assert v5e.host_pcie_bytes_per_s == 8 * hw.TPU_V5E.pcie_bytes_per_s
    assert v5e.dcn_bytes_per_s == 2 * hw.TPU_V5E.dcn_bytes_per_s_per_host
    assert Slice(hw.TPU_V5E, (16, 16)).num_hosts == hw.TPU_V5E.pod_hosts
    assert Slice(hw.TPU_V5P, (4, 4, 4)).num_hosts == 16
    assert Slice(hw.TPU_V5E, (2, 2)).num_hosts == 1  # a partly used host still counts once
    assert Slice(hw.TPU_V5E, (4, 4)).pcie_bytes_per_s == 16 * hw.TPU_V5E.pcie_bytes_per_s


def test_gpu_node_and_cluster():
    node = GpuNode(hw.H100)
    assert node.gpus == 8 and node.hops(0, 7) == 1 and node.hops(3, 3) == 0
    ax = node.axis()
    assert ax.wraparound and ax.bidi_bytes_per_s == ax.one_way_bytes_per_s == hw.H100.ici_one_way_bytes_per_s
    cluster = GpuCluster(node, nodes=4)
    assert cluster.num_gpus == 32
    assert cluster.scale_out_bytes_per_s_per_gpu == hw.H100.dcn_bytes_per_s_per_chip
    assert cluster.scale_out_axis().size == 4


@pytest.mark.parametrize("make, match", [
    (lambda: Slice(hw.TPU_V5E, (0, 4)), r"slice shape \(0, 4\): axis 0 must be a positive int, got 0"),
    (lambda: Slice(hw.TPU_V5E, (32, 16)), "does not fit"),
    (lambda: Slice(hw.TPU_V5E, (2, 2, 2)), "at most 2 axes"),
    (lambda: Slice(hw.H100, (8,)), "GPU"),
    (lambda: Slice(hw.TPU_V5E, (4, 4)).hops((0, 0), (4, 0)), "not a chip"),
    (lambda: Slice(hw.TPU_V5E, (4, 4)).axis(2), "axis must be"),
    (lambda: GpuNode(hw.TPU_V5E), "TPU"),
    (lambda: GpuNode(hw.H100, gpus=9), "gpus must be"),
    (lambda: ring_axis(hw.TPU_V5E, 0), "positive int"),
])
def test_bad_input_says_what_is_wrong(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_every_chip_of_small_slices_is_reachable():
    sl = Slice(hw.TPU_V5E, (4, 2))
    coords = list(itertools.product(range(4), range(2)))
    assert max(sl.hops(a, b) for a in coords for b in coords) == sl.diameter_hops == 4
