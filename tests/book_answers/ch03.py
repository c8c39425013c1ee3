"""Chapter 3 (sharded matrices): collective times and ratios, reproduced with scalelib.collectives.

Chip numbers come from scalelib.hardware; slices and their wraparounds from scalelib.topology.
Array and shard sizes and Exercise 3.4's strategies are reproduced in ch03_matmul.py
(scalelib.sharding and scalelib.sharded_matmul).
"""

from scalelib import collectives as cc
from scalelib import hardware as hw
from scalelib import roofline as rl
from scalelib.topology import Slice, ring_axis

V5E, V4P = hw.TPU_V5E, hw.TPU_V4P
QUIZ_Y = Slice(V5E, (8, 4)).axis(1)  # pop quiz 2: Mesh({'X': 8, 'Y': 4}) on v5e, Y has no wraparound
CUBE = Slice(V4P, (4, 4, 4))  # Exercises 3.2, 3.3: a whole cube, every axis wraps


def _gather_v(shard_bytes: float, axis) -> float:
    """The gathered array of an AllGather whose per-device shard is ``shard_bytes``."""
    return shard_bytes * axis.size


def _ratio(op_a: str, op_b: str, n: int, bidirectional: bool, field: str = "bandwidth_s") -> float:
    axis = ring_axis(V5E, n)
    a, b = cc.collective(op_a, 1e9, axis, bidirectional), cc.collective(op_b, 1e9, axis, bidirectional)
    get = (lambda c: c.counts.busiest_link_bytes) if field == "busiest" else (lambda c: getattr(c, field))
    return get(a) / get(b)


def _speedup(op: str, n: int) -> float:
    """Busiest link of the one-way ring over that of the two-way ring (Exercise 3.10)."""
    axis = ring_axis(V5E, n)
    one, both = cc.collective(op, 1e9, axis, False), cc.collective(op, 1e9, axis, True)
    return one.ring_bandwidth_s / both.ring_bandwidth_s


REPRODUCERS = {
    "ch3-ici-latency-bound-buffer-size": lambda i: cc.latency_bound_bytes(QUIZ_Y),
    # the book first assumes a full ring on Y, then corrects itself: v5e's Y of 4 has no wraparound
    "ch3-popquiz2-allgather-time-bidi": lambda i: cc.all_gather(
        i["V"], ring_axis(V5E, QUIZ_Y.size, wraparound=True)).bandwidth_s,
    "ch3-popquiz2-allgather-time-no-wrap": lambda i: cc.all_gather(
        _gather_v(i["shard_bytes"], QUIZ_Y), QUIZ_Y).bandwidth_s,
    "ch3-popquiz2-small-hop-time": lambda i: cc.all_gather(
        _gather_v(i["shard_bytes"], QUIZ_Y), QUIZ_Y).step_bandwidth_s,
    "ch3-popquiz2-small-latency-bound-time": lambda i: cc.all_gather(
        rl.array_bytes((256, 256), 2), QUIZ_Y).total_s,
    "ch3-allreduce-vs-allgather-cost": lambda i: _ratio("all_reduce", "all_gather", 16, True),
    "ch3-alltoall-vs-allgather-cost-bidi": lambda i: _ratio("all_to_all", "all_gather", i["N"], True),
    "ch3-ex3.2-allgather-x-time": lambda i: cc.all_gather(
        rl.array_bytes((i["B"], i["D"] // i["Y"]), i["dtype_bytes"]), CUBE.axis(0)).bandwidth_s,
    "ch3-ex3.2-allgather-xy-time": lambda i: cc.all_gather(
        rl.array_bytes((i["B"], i["D"]), i["dtype_bytes"]), CUBE.axes(0, 1)).bandwidth_s,
    "ch3-ex3.2-latency-bound": lambda i: cc.all_gather(
        rl.array_bytes((1024, 4096), 2), CUBE.axes(0, 1)).latency_s,
    "ch3-ex3.2-allreduce-z-time": lambda i: cc.all_reduce(
        rl.array_bytes((i["B"] // i["X"], i["D"] // i["Y"]), i["dtype_bytes"]), CUBE.axis(2)).bandwidth_s,
    "ch3-ex3.3-latency-bound-time": lambda i: cc.all_gather(
        rl.array_bytes((128,), 2), CUBE.axis(0)).total_s,
    "ch3-ex3.10-uni-alltoall-vs-allgather": lambda i: _ratio("all_to_all", "all_gather", i["D"], False, "busiest"),
    # exact for any ring size: both directions carry (N - 1) / (2N) of the array each
    "ch3-ex3.10-bidi-allgather-speedup": lambda i: _speedup("all_gather", 16),
    "ch3-ex3.10-bidi-alltoall-speedup": lambda i: _speedup("all_to_all", int(i["D"])),
}
