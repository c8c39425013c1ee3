"""Chapter 3 (sharded matrices): array sizes under a sharding, and Exercise 3.4's matmul
strategies, reproduced with scalelib.sharding and scalelib.sharded_matmul.

The pure collective timings of chapter 3 (AllGather / AllReduce / AllToAll costs and latency
bounds) are reproduced in ch03.py with scalelib.collectives.
"""

import math

from scalelib import hardware as hw
from scalelib import topology
from scalelib.sharded_matmul import crossover, plan_cost, plan_matmul, ring_axes_of, shards_at_balance
from scalelib.sharding import parse

# Exercise 3.4 names no chip; the book's C / W_ici = 2550 is TPU v5p's (bf16 FLOPs/s over
# bidirectional ICI). The exercise's X is one wrapped axis of a v5p cube.
V5P_AXES = ring_axes_of(topology.Slice(hw.TPU_V5P, (4, 4, 4)), ("X", "Y", "Z"))
STRATEGY_1 = plan_matmul("X[B, D]", "Y[D_X, F]")  # AllGather Y, then multiply
STRATEGY_2 = plan_matmul("X[B, D]", "Y[D_X, F]", strategy="reduce")  # partial sums, AllReduce
# Sizes the answers do not depend on (they cancel); only their presence matters.
_B, _D, _F = 256, 8192, 32768


def _cost(plan, b=_B, d=_D, f=_F):
    return plan_cost(plan, {"B": b, "D": d, "F": f}, V5P_AXES, hw.TPU_V5P, dtype_bytes=2)


def _one_copy_bytes(shape, dtype_bytes):
    dims = ", ".join(f"D{i}" for i in range(len(shape)))
    return parse(f"A[{dims}]").local_bytes(shape, {}, dtype_bytes)


REPRODUCERS = {
    # Pop quiz: int8[128, 2048] as A[I_XY, J] on {X: 2, Y: 8, Z: 2}
    "ch3-popquiz-per-device-bytes": lambda i: parse("A[I_XY, J]").local_bytes(
        i["shape"], {"X": i["X"], "Y": i["Y"], "Z": i["Z"]}, i["dtype_bytes"]),
    # the entry keeps only Z; X and Y are the quiz's 2 and 8 (the total does not depend on them)
    "ch3-popquiz-total-bytes": lambda i: parse("A[I_XY, J]").total_bytes(
        i["shape"], {"X": 2, "Y": 8, "Z": i["Z"]}, i["dtype_bytes"]),
    # section 3.1.2's JAX snippet: A[I_X, J_Y] and B[J, K_Y] on a 4x2 mesh
    "ch3-jax-example-local-elements-A": lambda i: math.prod(parse("A[I_X, J_Y]").local_shape(
        i["global_shape"], {"X": i["X"], "Y": i["Y"]})),
    "ch3-jax-example-local-elements-B": lambda i: math.prod(parse("B[J, K_Y]").local_shape(
        i["global_shape"], {"Y": i["Y"]})),
    # Pop quiz 2: bf16 A[E_Y, F]
    "ch3-popquiz2-shard-bytes": lambda i: parse("A[E_Y, F]").local_bytes(
        (i["E"], i["F"]), {"Y": i["Y"]}, i["dtype_bytes"]),
    "ch3-popquiz2-total-bytes": lambda i: _one_copy_bytes((i["E"], i["F"]), i["dtype_bytes"]),
    "ch3-popquiz2-small-shard-bytes": lambda i: parse("A[E_Y, F]").local_bytes(
        (i["E"], i["F"]), {"Y": i["Y"]}, i["dtype_bytes"]),
    # Exercise 3.1: A[I_X, J, K] on {X: 4, Y: 8, Z: 2}; all copies over one copy
    "ch3-ex3.1-replication-ratio": lambda i: parse("A[I_X, J, K]").total_bytes(
        (i["X"], 1, 1), {"X": i["X"], "Y": i["Y"], "Z": i["Z"]}, 1) / _one_copy_bytes((i["X"], 1, 1), 1),
    # Exercise 3.3: bf16 A[B_X] with B = 128
    "ch3-ex3.3-total-bytes": lambda i: _one_copy_bytes((i["B"],), i["dtype_bytes"]),
    "ch3-ex3.3-per-device-bytes": lambda i: parse("A[B_X]").local_bytes((i["B"],), {"X": i["X"]}, i["dtype_bytes"]),
    # Exercise 3.4: batch at which Strategy 1's compute catches up with its AllGather
    "ch3-ex3.4-strategy1-critical-batch": lambda i: crossover(
        lambda b: _cost(STRATEGY_1, b=b).compute_s - _cost(STRATEGY_1, b=b).comms_s, 1.0, 1e7),
    # Strategy 2 stays compute-bound only while X < D / (2 C / W): the X where the two balance
    "ch3-ex3.4-strategy2-max-X": lambda i: shards_at_balance(_cost(STRATEGY_2, d=i["D"]), V5P_AXES["X"].size),
    # large batch: Strategy 2's AllReduce hides under Strategy 1's compute once D passes this
    "ch3-ex3.4-large-batch-D-threshold": lambda i: crossover(
        lambda d: _cost(STRATEGY_1, d=d).compute_s - _cost(STRATEGY_2, d=d).comms_s, 1.0, 1e7),
}
