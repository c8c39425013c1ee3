"""GPU rooflines of each parallelism (scalelib.gpus.parallel_rooflines)."""

import pytest

from scalelib import hardware as hw
from scalelib.gpus import fabric as fb
from scalelib.gpus import parallel_rooflines as pr

NODE = fb.H100_NODE
C = hw.variant(hw.H100, "bf16_flops_per_s", "gpu part").bf16_flops_per_s


def test_collective_bandwidth_depends_on_whether_the_axis_leaves_the_node():
    assert pr.collective_bytes_per_s(NODE, 8) == NODE.gpu_egress_bytes_per_s
    assert pr.collective_bytes_per_s(NODE, 9) == NODE.egress_bytes_per_s
    assert pr.collective_bytes_per_s(fb.GB200_NVL72, 72) == fb.GB200_NVL72.gpu_egress_bytes_per_s


def test_data_parallel_minimum_batch():
    inside = pr.dp_min_tokens_per_gpu(C, pr.collective_bytes_per_s(NODE, 8))
    across = pr.dp_min_tokens_per_gpu(C, pr.collective_bytes_per_s(NODE, 64))
    assert inside == pytest.approx(2200) and across == pytest.approx(2475)
    assert pr.dp_min_tokens_per_gpu(C, NODE.egress_bytes_per_s, experts=128, active=4) == pytest.approx(32 * 2475)
    assert pr.dp_min_tokens_per_gpu(C, NODE.egress_bytes_per_s, ways=2) == pytest.approx(2475 / 2)
    assert pr.dp_min_global_batch(16, 100.0) == 1600


def test_model_parallel_across_nodes_lowers_the_data_parallel_bar():
    assert pr.model_parallel_dp_tokens_per_gpu(C, NODE, 8) == pr.dp_min_tokens_per_gpu(C, NODE.egress_bytes_per_s)
    assert pr.model_parallel_dp_tokens_per_gpu(C, NODE, 64) == pytest.approx(2475 / 8)


def test_tensor_parallel_limits():
    assert pr.tp_max_ways(28000, C, NODE.egress_bytes_per_s) == pytest.approx(11.3, rel=1e-2)
    assert pr.tp_max_ways(28672, C, NODE.gpu_egress_bytes_per_s) == pytest.approx(13.03, rel=1e-3)
    assert pr.tp_max_ways_two_nodes(28000, C, NODE) == pytest.approx(19.3, rel=1e-2)


def test_expert_parallel_regimes():
    threshold = pr.ep_large_ffw_threshold(C, NODE)
    assert threshold == pytest.approx(19800)
    w = NODE.egress_bytes_per_s
    # inside a node the AllToAlls are free in this model; across nodes large F keeps it compute bound
    assert pr.ep_times(1e6, 8192, 2048, 8, 8, C, w).comms_s == 0
    wide_big_f = pr.ep_times(1e6, 8192, 2 * 19800, 8, 256, C, w)
    wide_small_f = pr.ep_times(1e6, 8192, 2048, 8, 256, C, w)
    assert wide_big_f.compute_bound and not wide_small_f.compute_bound


def test_pipeline_costs_are_small_and_bubbles_shrink_with_microbatches():
    one = pr.pp_comms_s(1e6, 8192, NODE.egress_bytes_per_s, microbatches=16, stages=16)
    assert one == pytest.approx(2 * 1e6 * 8192 / (400e9 * 16) * 30)
    assert pr.pp_bubble_fraction(16, 4) < pr.pp_bubble_fraction(4, 4) < pr.pp_bubble_fraction(1, 4)
    assert pr.pp_bubble_fraction(8, 1) == 0


@pytest.mark.parametrize("call, message", [
    (lambda: pr.collective_bytes_per_s(NODE, 0), "ways"),
    (lambda: pr.dp_min_tokens_per_gpu(C, 0.0), "collective_bytes_per_s"),
    (lambda: pr.tp_max_ways(-1, C, 1e9), "ffw"),
    (lambda: pr.pp_bubble_fraction(0, 2), "microbatches"),
])
def test_bad_input_says_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()
