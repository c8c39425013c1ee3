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
    assert POD.scale_out_plan(2048).fits
    huge = POD.scale_out_plan(4096)
    assert (huge.sus, huge.spines, huge.cables_per_leaf_spine) == (16, 64, 1)
    assert huge.spine_ports_used == 128 > POD.ib_switch_ports  # a third level is needed past 2048 GPUs
    assert huge.leaf_down_ports + huge.leaf_up_ports == 96 > POD.ib_switch_ports  # and the leaves run out too
    assert not huge.fits
    with pytest.raises(ValueError, match=r"each spine would need 128 ports.*a third \(core\) level is needed"):
        POD.scaled_to(4096)
    assert POD.scaled_to(1024) == POD


def test_an_oversubscribed_leaf_is_the_bottleneck():
    # half the spines: each leaf has 32 node-facing ports but only 16 up, so traffic leaving an SU halves there
    over = fb.SuperPod(NODE, spines=8, cables_per_leaf_spine=2)
    assert (over.leaf_down_ports, over.leaf_up_ports, over.leaf_oversubscription) == (32, 16, 2.0)
    per = over.per_node_bytes_per_s()
    assert per["leaf"] == 200e9 < per["node egress"] == 400e9
    assert over.su_leaf_through_bytes_per_s == 6.4e12 < over.su_leaf_ingress_bytes_per_s == 12.8e12
    # spare ports carry nothing: 16 nodes per SU leave 16 of each leaf's 64 ports idle, and the leaf still gives a
    # node its egress (not 48 ports' worth, as counting every port that does not face a spine would)
    spare = fb.SuperPod(NODE, nodes_per_su=16)
    assert (spare.leaf_down_ports, spare.leaf_up_ports) == (16, 32)
    assert spare.per_node_bytes_per_s()["leaf"] == 400e9 and spare.full_bisection


def test_impossible_pods_are_refused():
    with pytest.raises(ValueError, match=r"256 NIC cables of one SU .* do not divide evenly over its 3 leaf"):
        fb.SuperPod(NODE, leaves_per_su=3)
    with pytest.raises(ValueError, match=r"each leaf switch needs 32 node-facing ports .* \+ 48 up ports "
                                         r"\(24 spines x 2 cables\) = 80, but a switch has 64"):
        fb.SuperPod(NODE, spines=24)
    with pytest.raises(ValueError, match=r"each spine switch needs 96 ports \(96 leaves x 1 cables\), but a "
                                         r"switch has 64.*third \(core\) level"):
        fb.SuperPod(NODE, sus=12, spines=32, cables_per_leaf_spine=1)


def test_reference_pods_keep_the_books_numbers():
    for pod in (fb.H100_SUPERPOD, fb.B200_SUPERPOD):
        assert (pod.leaf_down_ports, pod.leaf_up_ports, pod.spine_ports_used) == (32, 32, 64)
        assert pod.su_leaf_ingress_bytes_per_s == pod.su_leaf_through_bytes_per_s == 12.8e12
        assert pod.su_to_spine_bytes_per_s == fb.leaf_spine_bytes_per_s(8, 16, 2, 50e9) == 12.8e12
        assert pod.per_node_bytes_per_s() == {"node egress": 400e9, "leaf": 400e9, "spine cables": 400e9,
                                              "spine switches": 400e9}


@pytest.mark.parametrize("call, message", [
    (lambda: POD.scaled_to(1000), "multiple of one SU"),
    (lambda: fb.scale_out_plan(2048, 256, 8, 32, 0), "switch_ports must be a positive int"),
    (lambda: fb.Node(gs.V100, 8, 6, 64, 8), "no NVLink generation"),
    (lambda: fb.Node(gs.H100, 0, 4, 64, 8), "Node.gpus must be a positive int"),
    (lambda: fb.SuperPod(NODE, sus=True), "SuperPod.sus"),
    (lambda: fb.SuperPod(NODE, ib_link_bytes_per_s=0), "ib_link_bytes_per_s"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
