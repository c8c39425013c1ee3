"""Chapter 2 (TPUs), Exercises 2.5 and 2.6: hops, point-to-point transfers and gathering onto one chip.

Reproduced with scalelib.topology (the slice and its links) and scalelib.collectives (transfer
and receive times); chip numbers come from scalelib.hardware.
"""

from scalelib import collectives as cc
from scalelib import hardware as hw
from scalelib import roofline as rl
from scalelib.topology import Slice

V5E_4x4 = Slice(hw.TPU_V5E, (4, 4))  # no axis of 16, so no wraparound: a 2D mesh
EX_2_5_BYTES = rl.array_bytes((8, 128, 8192), 2)  # the bf16[8, 128, 8192] array of Exercise 2.5


def _corner_transfer(num_bytes: float = EX_2_5_BYTES) -> cc.Transfer:
    # Exercise 2.5: the array goes from TPU{0, 0} to TPU{3, 3}.
    return cc.point_to_point(V5E_4x4, (0, 0), (3, 3), num_bytes)


def _exercise_2_6_total(i: dict) -> float:
    # Stages overlap, so the slowest one sets the time: PCIe load per host, ICI gather onto
    # TPU{0, 0}, HBM -> MXU streaming, and the FLOPs (the book treats the array as 16e9 bytes).
    pcie = rl.comms_time_s(i["bytes_per_host"], V5E_4x4.host_pcie_bytes_per_s)
    ici = cc.receive_bound_s(V5E_4x4, (0, 0), i["bytes_received"])
    hbm = rl.comms_time_s(i["array_bytes"], hw.TPU_V5E.hbm_bytes_per_s)
    flops = rl.compute_time_s(i["flops"], hw.TPU_V5E.bf16_flops_per_s)
    return max(pcie, ici, hbm, flops)


REPRODUCERS = {
    "ch2-ex2.5-send-bandwidth": lambda i: _corner_transfer().bytes_per_s,
    "ch2-ex2.5-hops": lambda i: V5E_4x4.hops((0, 0), (i["dx"], i["dy"])),
    "ch2-ex2.5-first-byte-latency": lambda i: _corner_transfer().first_byte_s,
    # the book's "total transfer" is the streaming time alone (6 us of latency left out)
    "ch2-ex2.5-total-transfer-time": lambda i: _corner_transfer(i["bytes"]).bandwidth_s,
    "ch2-ex2.6-ici-gather-time": lambda i: cc.receive_bound_s(V5E_4x4, (0, 0), i["bytes_received"]),
    "ch2-ex2.6-total-time": _exercise_2_6_total,
}
