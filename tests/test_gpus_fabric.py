"""GPU networks (scalelib.gpus.fabric): the 8xH100 node and the DGX H100 SuperPod's fat tree."""

import pytest

from scalelib.gpus import fabric as fb
from scalelib.gpus import gpu_specs as gs

NODE, POD = fb.H100_NODE, fb.H100_SUPERPOD


def test_node_bandwidths():
    assert NODE.nvswitch_bytes_per_s == 64 * 25e9
    assert NODE.switches_bytes_per_s == 4 * 64 * 25e9 > NODE.gpus_bytes_per_s == 8 * 450e9
    assert NODE.total_bytes_per_s == NODE.gpus_bytes_per_s  # the GPUs' links, not the switches, limit it
    assert NODE.bisection_bytes_per_s() == 2 * NODE.bisection_bytes_per_s(directions=1) == 3.6e12
    assert NODE.egress_bytes_per_s == 400e9 and NODE.scale_out_bytes_per_s_per_gpu == 50e9


def test_nvl72_has_nine_times_the_egress_of_an_h100_node():
    assert fb.GB200_NVL72.egress_bytes_per_s == 9 * NODE.egress_bytes_per_s == 3.6e12
    assert fb.GB200_NVL72.gpu_egress_bytes_per_s == 2 * NODE.gpu_egress_bytes_per_s
    # NVL72's switches carry every GPU's 18 links: ports x switches = GPUs x links
    assert fb.GB200_NVL72.nvswitches * fb.GB200_NVL72.nvswitch_ports == 72 * gs.NVLINK_5.ports_per_gpu
    assert fb.B200_NODE.nvswitches * fb.B200_NODE.nvswitch_ports == 8 * gs.NVLINK_5.ports_per_gpu


def test_reference_superpod_counts():
    assert (POD.nodes, POD.gpus, POD.leaves, POD.spines, POD.switches) == (128, 1024, 32, 16, 560)
    assert POD.leaf_down_ports + POD.leaf_up_ports == POD.ib_switch_ports  # every leaf port used
    assert POD.spine_ports_used == POD.ib_switch_ports


def test_every_level_gives_each_node_its_full_egress():
    assert POD.full_bisection
    assert set(POD.per_node_bytes_per_s().values()) == {400e9}
    assert POD.bisection_bytes_per_s() == 128 * 400e9


def test_a_thinner_spine_breaks_full_bisection():
    thin = fb.SuperPod(NODE, spines=8, cables_per_leaf_spine=2)
    assert not thin.full_bisection
    assert thin.per_node_bytes_per_s()["spine switches"] == 200e9


def test_levels_and_their_ring_bandwidths():
    node, leaf, spine = POD.levels()
    assert (node.degree, leaf.degree, spine.degree) == (8, 32, 4)
    assert node.collective_bytes_per_s == pytest.approx(514.3e9, rel=1e-3)
    assert leaf.collective_bytes_per_s == pytest.approx(412.9e9, rel=1e-3)
    assert spine.collective_bytes_per_s == pytest.approx(17.07e12, rel=1e-3)
    assert fb.TreeLevel("one", 1, 1, 1.0, 0, 0).collective_bytes_per_s == float("inf")


def test_scaling_the_pod_keeps_every_uplink():
    big = POD.scaled_to(2048)
    assert (big.sus, big.spines, big.cables_per_leaf_spine, big.spine_ports_used) == (8, 32, 1, 64)
    assert big.full_bisection
    huge = POD.scaled_to(4096)
    assert huge.spine_ports_used == 128 > huge.ib_switch_ports  # a third level is needed past 2048 GPUs
    assert POD.scaled_to(1024) == POD


@pytest.mark.parametrize("call, message", [
    (lambda: POD.scaled_to(1000), "multiple of one SU"),
    (lambda: fb.Node(gs.V100, 8, 6, 64, 8), "no NVLink generation"),
    (lambda: fb.Node(gs.H100, 0, 4, 64, 8), "Node.gpus must be a positive int"),
    (lambda: fb.SuperPod(NODE, sus=True), "SuperPod.sus"),
    (lambda: fb.SuperPod(NODE, ib_link_bytes_per_s=0), "ib_link_bytes_per_s"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
