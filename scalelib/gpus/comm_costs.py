"""How long collectives take on GPUs: inside a node over NVLink, and across the InfiniBand fat tree.

Book: the GPU part, "How Do Collectives Work on GPUs?" (intra-node AllGather / ReduceScatter / AllReduce /
AllToAll, sparse AllToAll, NCCL measurements, SHARP), "Cross-node collectives" (the per-level ring rule,
AllToAll across nodes, reductions over an array sharded on another axis) and Quiz 4.

Every function is throughput bound, as the book's model is: ``bytes`` is the whole array (the sum over all
shards), each GPU holds ``bytes / n`` before an AllGather, and bandwidths are one direction.
Collective patterns: AllGather / ReduceScatter are a ring (each of ``n - 1`` steps moves ``bytes / n`` per GPU);
an AllReduce is both (or, with SHARP, one pass through the switch); an AllToAll sends each GPU's ``1 / n`` slice
of its shard straight to each peer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scalelib.gpus.fabric import Node, TreeLevel
from scalelib.validate import non_negative, positive, positive_int


# ---- inside one node (every GPU reaches every other in one switched hop) ----
def _ring_share(n: int, exact: bool) -> float:
    return (n - 1) / n if exact else 1.0


def ring_all_gather_s(num_bytes: float, n: int, link_bytes_per_s: float, exact: bool = True) -> float:
    """AllGather (or ReduceScatter) of ``num_bytes`` over ``n`` GPUs: (n - 1) / n of the array through each
    GPU's egress, ``bytes (n - 1) / (n W)``; ``exact=False`` gives the book's approximation ``bytes / W``."""
    n = positive_int("n", n)
    return (non_negative("num_bytes", num_bytes) * _ring_share(n, exact)
            / positive("link_bytes_per_s", link_bytes_per_s))


def all_reduce_s(num_bytes: float, n: int, link_bytes_per_s: float, sharp: bool = False) -> float:
    """AllReduce: a ReduceScatter then an AllGather (twice the ring), or with SHARP in-network reductions one
    pass of exactly ``bytes / W`` (each GPU egresses and ingresses ``bytes`` once in all; Quiz 4, Q2)."""
    if sharp:
        positive_int("n", n)
        return non_negative("num_bytes", num_bytes) / positive("link_bytes_per_s", link_bytes_per_s)
    return 2 * ring_all_gather_s(num_bytes, n, link_bytes_per_s)


def all_to_all_s(num_bytes: float, n: int, link_bytes_per_s: float, k: int | None = None, exact: bool = True) -> float:
    """AllToAll inside a node: each GPU sends ``bytes / n**2`` to each of its ``n - 1`` peers, so
    ``bytes (n - 1) / (n**2 W)``; ``exact=False``: ``bytes / (n W)`` (a TPU ring pays ``bytes / (4 W)``).

    ``k``: a ragged top-k AllToAll where at most ``k`` of the ``n`` destinations of each row are non-zero,
    which scales the cost by ``min(k / n, 1)``.
    """
    n = positive_int("n", n)
    dense = (non_negative("num_bytes", num_bytes) * _ring_share(n, exact)
             / (n * positive("link_bytes_per_s", link_bytes_per_s)))
    return dense * (1.0 if k is None else sparse_fraction(k, n))


def sparse_fraction(k: int, n: int) -> float:
    """Share of an AllToAll's bytes that a top-k dispatch moves: ``min(k / n, 1)``."""
    return min(positive_int("k", k) / positive_int("n", n), 1.0)


def expected_distinct_fraction(k: int, z: int) -> float:
    """Expected share of ``z`` destinations hit by ``k`` independent uniform picks, less the GPU itself:
    ``(1 - ((z - 1) / z)**k) (z - 1) / z`` (the book's footnote on random expert choice)."""
    z = positive_int("z", z)
    return (1 - ((z - 1) / z) ** positive_int("k", k)) * (z - 1) / z


# ---- across nodes ----
def cross_node_all_to_all_s(num_bytes: float, nodes: int, node_egress_bytes_per_s: float,
                            exact: bool = True) -> float:
    """AllToAll spanning ``nodes`` nodes: no help from the fat tree, ``bytes (M - 1) / (M**2 W_node)``;
    ``exact=False``: ``bytes / (M W_node)`` (each GPU effectively has its own NIC's 50 GB/s)."""
    m = positive_int("nodes", nodes)
    return (non_negative("num_bytes", num_bytes) * _ring_share(m, exact)
            / (m * positive("node_egress_bytes_per_s", node_egress_bytes_per_s)))


def tree_collective_bytes_per_s(levels: Sequence[TreeLevel]) -> float:
    """AllGather / ReduceScatter bandwidth of a tree: each level runs its own ring, the slowest level sets the
    pace, ``min_i D_i W_i / (D_i - 1)`` (413 GB/s for the H100 SuperPod: its leaf level)."""
    if not levels:
        raise ValueError("levels is empty: pass fabric levels such as SuperPod.levels()")
    return min(level.collective_bytes_per_s for level in levels)


def tree_all_gather_s(num_bytes: float, levels: Sequence[TreeLevel]) -> float:
    """AllGather (or ReduceScatter) of ``num_bytes`` over every GPU below the top of ``levels``."""
    return non_negative("num_bytes", num_bytes) / tree_collective_bytes_per_s(levels)


def hierarchical_all_gather_s(num_bytes: float, node: Node) -> float:
    """The first approximation beyond one node: the slower of the node's NVLink and its egress,
    ``max(bytes / W_gpu, bytes / W_node)``."""
    b = non_negative("num_bytes", num_bytes)
    return max(b / node.gpu_egress_bytes_per_s, b / node.egress_bytes_per_s)


@dataclass(frozen=True)
class ShardedReduction:
    """A reduction over an axis X of an array also sharded over an inner axis Y (cross-node collectives)."""

    node_s: float
    scale_out_s: float

    @property
    def total_s(self) -> float:
        return max(self.node_s, self.scale_out_s)


def sharded_reduction(num_bytes: float, y: int, node: Node) -> ShardedReduction:
    """AllGather / ReduceScatter over X of ``num_bytes`` sharded ``y`` ways on the inner axis: the node-level
    part shrinks by ``min(y, node GPUs)``, the scale-out part only once Y spans several nodes."""
    y = positive_int("y", y)
    b = non_negative("num_bytes", num_bytes)
    d = node.gpus
    return ShardedReduction(b / node.gpu_egress_bytes_per_s / min(y, d), b / node.egress_bytes_per_s * d / max(d, y))


# ---- what the switches carry (Quiz 4) ----
@dataclass(frozen=True)
class SwitchBytes:
    """Bytes into and out of one switch during a collective, as multiples of the array size ``B``."""

    ingress: float
    egress: float


def su_all_gather_switch_bytes(nodes: int, gpus_per_node: int) -> tuple[SwitchBytes, SwitchBytes]:
    """AllGather of ``B`` bytes over one SU of M nodes x N GPUs: (a node's NVSwitch level, the leaf level).

    Node: its GPUs send ``B / M`` up and take ``B (M - 1) / M`` down; it then serves each of its N GPUs the
    ``B - B / (M N)`` it lacks. Leaf: ``B / M`` arrives from each node, ``B (M - 1) / M`` goes to each.
    """
    m, n = positive_int("nodes", nodes), positive_int("gpus_per_node", gpus_per_node)
    node = SwitchBytes(1 / m + (m - 1) / m, 1 / m + n * (1 - 1 / (m * n)))
    top = SwitchBytes(m * (1 / m), m * (m - 1) / m)
    return node, top


def sharp_all_reduce_switch_bytes(n: int) -> SwitchBytes:
    """AllReduce of ``B`` bytes with SHARP in one node of n GPUs: ``B (n - 1) + B`` in and out (Quiz 4, Q2)."""
    n = positive_int("n", n)
    return SwitchBytes((n - 1) + 1, 1 + (n - 1))


# ---- what NCCL measures ----
def nccl_bus_bytes_per_s(algo_bytes_per_s: float, n: int) -> float:
    """NCCL's "bus bandwidth" of an AllReduce: ``2 algo (n - 1) / n``, comparable with one link's rate."""
    n = positive_int("n", n)
    return 2 * non_negative("algo_bytes_per_s", algo_bytes_per_s) * (n - 1) / n


def sharp_predicted_gain(n: int) -> float:
    """Bandwidth gain SHARP promises over a ring AllReduce: ``2 (n - 1) / n - 1`` (75 % on 8 GPUs)."""
    n = positive_int("n", n)
    return 2 * (n - 1) / n - 1


def with_gain(bytes_per_s: float, gain: float) -> float:
    """A bandwidth after a fractional gain (370 GB/s measured x 1.3 with SHARP)."""
    if not (math.isfinite(gain) and gain > -1):
        raise ValueError(f"gain must be a finite fraction > -1, got {gain!r}")
    return non_negative("bytes_per_s", bytes_per_s) * (1 + gain)
