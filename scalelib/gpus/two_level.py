"""A two-level AllReduce, as NCCL runs one across GPU nodes: ReduceScatter inside each node, AllReduce of the
shards across nodes, AllGather inside each node.

Book: the GPU part, "Cross-node collectives" (reduce within a node first, so only ``B`` bytes, not ``N B``,
leave it) and "Reductions when array is sharded over a separate axis".

Collective pattern on a ``(nodes, gpus)`` mesh: ``psum_scatter`` over ``gpus`` (NVLink), ``psum`` over ``nodes``
(each GPU with its peers of the same index in the other nodes: one NIC each), ``all_gather`` over ``gpus``.
:func:`two_level_all_reduce` is equal to ``psum`` over both axes; :func:`predicted_collectives` says which
collectives XLA must compile for it and how many bytes each returns, and :func:`two_level_all_reduce_s` prices
them on a :class:`~scalelib.gpus.fabric.Node`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from scalelib import compat, placement
from scalelib.gpus.comm_costs import all_reduce_s, ring_all_gather_s
from scalelib.gpus.fabric import Node

NODE_AXIS, GPU_AXIS = "node", "gpu"


def two_level_all_reduce_local(x: jax.Array, node_axis: str = NODE_AXIS, gpu_axis: str = GPU_AXIS) -> jax.Array:
    """Per device, inside ``shard_map``: x: f32[R, C] (this GPU's partial sum, R divisible by the node size)
    -> f32[R, C], the sum over every GPU of every node."""
    shard = jax.lax.psum_scatter(x, gpu_axis, scatter_dimension=0, tiled=True)  # [R / N, C]: NVLink
    shard = jax.lax.psum(shard, node_axis)  # [R / N, C]: across nodes, one NIC per GPU
    return compat.all_gather_invariant(shard, gpu_axis, axis=0, tiled=True)  # [R, C]: NVLink


def two_level_all_reduce(partials: jax.Array, mesh: jax.sharding.Mesh) -> jax.Array:
    """partials: f32[M * N * R, C], device (m, n) holding rows ``[(m N + n) R, (m N + n + 1) R)``, its partial sum
    -> f32[M * N * R, C] with every device's block replaced by the sum of all blocks (what ``psum`` gives)."""
    for name in (NODE_AXIS, GPU_AXIS):
        if name not in mesh.axis_names:
            raise ValueError(f"mesh needs axes ({NODE_AXIS!r}, {GPU_AXIS!r}); got {mesh.axis_names}: make it with "
                             f"compat.make_mesh((nodes, gpus), ({NODE_AXIS!r}, {GPU_AXIS!r}))")
    return _run(two_level_all_reduce_local, partials, mesh)


def flat_all_reduce(partials: jax.Array, mesh: jax.sharding.Mesh) -> jax.Array:
    """The reference: one ``psum`` over both axes, laid out like :func:`two_level_all_reduce`."""
    def local(x: Any) -> Any:
        return jax.lax.psum(x, (NODE_AXIS, GPU_AXIS))

    return _run(local, partials, mesh)


def jitted(local: Any, mesh: jax.sharding.Mesh) -> Any:
    """``local`` run per device over ``mesh``, rows split over (node, gpu), jitted (for compiling and timing)."""
    spec = P((NODE_AXIS, GPU_AXIS))
    return jax.jit(compat.shard_map(local, mesh=mesh, in_specs=spec, out_specs=spec))


def _run(local: Any, partials: jax.Array, mesh: jax.sharding.Mesh) -> jax.Array:
    placed = placement.put(partials, jax.sharding.NamedSharding(mesh, P((NODE_AXIS, GPU_AXIS))))
    return jitted(local, mesh)(placed)


@dataclass(frozen=True)
class PredictedCollective:
    kind: str
    axes: tuple[str, ...]
    result_bytes: int  # on one device


def predicted_collectives(rows: int, cols: int, gpus_per_node: int, dtype: Any = jnp.float32) -> tuple[
        PredictedCollective, ...]:
    """The three collectives of one device's ``[rows, cols]`` block, in program order, with their result bytes."""
    if rows % gpus_per_node:
        raise ValueError(f"rows ({rows}) must divide by the GPUs per node ({gpus_per_node}) to scatter them")
    block = rows * cols * jnp.dtype(dtype).itemsize
    shard = block // gpus_per_node
    return (PredictedCollective("reduce_scatter", (GPU_AXIS,), shard),
            PredictedCollective("all_reduce", (NODE_AXIS,), shard),
            PredictedCollective("all_gather", (GPU_AXIS,), block))


@dataclass(frozen=True)
class TwoLevelTimes:
    reduce_scatter_s: float
    cross_node_s: float
    all_gather_s: float

    @property
    def total_s(self) -> float:
        return self.reduce_scatter_s + self.cross_node_s + self.all_gather_s


def two_level_all_reduce_s(num_bytes: float, node: Node, nodes: int, sharp: bool = False) -> TwoLevelTimes:
    """Time of a two-level AllReduce of ``num_bytes`` (each GPU's full partial sum) over ``nodes`` nodes.

    Inside: a ring ReduceScatter and AllGather at NVLink speed. Across: each GPU AllReduces its ``1 / N`` shard
    with its peers over its own NIC (``W_node / N``), so the scale-out step costs the same as a ring AllReduce
    of all ``num_bytes`` at the node's egress.
    """
    n = node.gpus
    inside = ring_all_gather_s(num_bytes, n, node.gpu_egress_bytes_per_s)
    across = all_reduce_s(num_bytes / n, nodes, node.scale_out_bytes_per_s_per_gpu, sharp=sharp)
    return TwoLevelTimes(inside, across, inside)
