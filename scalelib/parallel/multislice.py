"""Data parallelism across slices: a fast level (ICI, inside a slice) and a slow one (DCN, between).

Book section 5 (training on several pods: data parallelism over the data-centre network) with
the collectives of section 3. Mesh ("slice", "data"): S slices of X chips; the batch is split
over both axes and the weights are replicated. Forward: no communication. Backward, per
gradient array, a hierarchical AllReduce:

1. ReduceScatter over ``data`` (ICI): each chip ends with 1/X of its slice's sum;
2. AllReduce over ``slice`` (DCN) of that 1/X shard only: the slow network carries X times
   fewer bytes than AllReducing whole gradients across slices;
3. AllGather over ``data`` (ICI) of the fully reduced shards.

``reduction_time`` prices the three steps with a ``hardware.Chip``: ICI by
``scalelib.collectives`` on a ring of X chips, DCN as 2 (S - 1) / S x bytes over the chip's share
of its host's DCN bandwidth (``Chip.dcn_bytes_per_s_per_chip``), against the flat alternative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import jax
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from scalelib import collectives, compat, hardware, model, train
from scalelib.parallel.data import (Collective, check_batch, local_grads, nbytes, param_shapes, place,
                                    predicted_memory_bytes as _data_memory, replicated, state_specs, MemoryPrediction)
from scalelib.parallel.fsdp import shard_dim
from scalelib.topology import RingAxis
from scalelib.transformer import TransformerConfig

AXES = ("slice", "data")


def _sizes(mesh_shape: Mapping[str, int]) -> tuple[int, int]:
    if tuple(mesh_shape) != AXES:
        raise ValueError(f"multislice data parallelism needs a mesh with axes {AXES} in that order, got "
                         f"{dict(mesh_shape)}; build it with compat.make_mesh((S, X), {AXES})")
    return mesh_shape["slice"], mesh_shape["data"]


def _dim(shape, x: int) -> int:
    d = shard_dim(shape, x, layered=False)
    return -1 if d is None else d


def make_step(cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam()):
    """Jitted ``step(state, tokens) -> (state, loss)`` with the hierarchical gradient AllReduce."""
    s_, x = _sizes(mesh.shape)
    shapes = param_shapes(cfg)
    dims = jax.tree.map(lambda s: _dim(s.shape, x), shapes)

    def reduce(g, d):  # g: this chip's gradient, the full array
        if d < 0:  # nothing divides: one flat AllReduce over both levels
            return lax.psum(g, AXES) / (s_ * x)
        shard = lax.psum_scatter(g, "data", scatter_dimension=d, tiled=True)  # ICI ReduceScatter -> [.., D/X, ..]
        shard = lax.psum(shard, "slice")  # DCN AllReduce of the shard only
        return compat.all_gather_invariant(shard, "data", axis=d, tiled=True) / (s_ * x)  # ICI AllGather

    def local(state: train.TrainState, tokens: jax.Array):  # tokens [B/(S X), T+1] per chip
        params = compat.pvary(state.params, AXES)
        loss, grads = local_grads(lambda p, t: model.loss(p, t, cfg), params, tokens, 1, AXES)
        grads = jax.tree.map(reduce, grads, dims)
        new, opt = train.adam_update(hp, grads, state.opt, state.params)
        return train.TrainState(new, opt), lax.pmean(loss, AXES)

    spec = state_specs(shapes, replicated(shapes))
    fn = compat.shard_map(local, mesh=mesh, in_specs=(spec, P(AXES)), out_specs=(spec, P()))
    return jax.jit(fn)


def shard_inputs(state: train.TrainState, tokens: jax.Array, mesh: jax.sharding.Mesh):
    s_, x = _sizes(mesh.shape)
    check_batch(tokens.shape[0], s_ * x, AXES)
    return place(state, mesh, state_specs(state.params, replicated(state.params))), \
        jax.device_put(tokens, NamedSharding(mesh, P(AXES)))


def predicted_collectives(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int,
                          seq_len: int) -> tuple[Collective, ...]:
    """Per gradient array: ReduceScatter_data, AllReduce_slice of the 1/X shard, AllGather_data."""
    s_, x = _sizes(mesh_shape)
    check_batch(batch, s_ * x, AXES)
    out = []
    for s in jax.tree.leaves(param_shapes(cfg)):
        full = nbytes(s)
        if _dim(s.shape, x) < 0:
            out.append(Collective("all_reduce", AXES, full))
        else:
            out += [Collective("reduce_scatter", ("data",), full // x), Collective("all_reduce", ("slice",), full // x),
                    Collective("all_gather", ("data",), full)]
    return tuple(out) + (Collective("all_reduce", AXES, 4, phase="loss"),)


def predicted_memory_bytes(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int,
                           seq_len: int) -> MemoryPrediction:
    """As pure data parallelism over S X chips: everything replicated."""
    return _data_memory(cfg, mesh_shape, batch, seq_len, axes=AXES)


@dataclass(frozen=True)
class ReductionTime:
    """Seconds to reduce ``grad_bytes`` of gradients over S slices of X chips."""

    ici_reduce_scatter_s: float
    dcn_all_reduce_s: float
    ici_all_gather_s: float
    flat_dcn_all_reduce_s: float  # the alternative: every chip AllReduces whole gradients over DCN

    @property
    def hierarchical_s(self) -> float:
        return self.ici_reduce_scatter_s + self.dcn_all_reduce_s + self.ici_all_gather_s

    @property
    def speedup(self) -> float:
        return self.flat_dcn_all_reduce_s / self.hierarchical_s


def dcn_all_reduce_s(array_bytes: float, n_slices: int, chip: hardware.Chip) -> float:
    """Ring AllReduce across slices: each chip sends and receives 2 (S - 1) / S of its array over DCN."""
    return 2 * (n_slices - 1) / n_slices * array_bytes / chip.dcn_bytes_per_s_per_chip


def reduction_time(grad_bytes: float, n_slices: int, slice_chips: int, chip: hardware.Chip) -> ReductionTime:
    """Price the hierarchical reduction of ``grad_bytes`` (one copy of all gradients) on ``chip``."""
    if n_slices < 1 or slice_chips < 1 or grad_bytes < 0:
        raise ValueError(f"need n_slices >= 1, slice_chips >= 1, grad_bytes >= 0; got {n_slices}, {slice_chips}, "
                         f"{grad_bytes}")
    ring = RingAxis(size=slice_chips, wraparound=chip.torus, one_way_bytes_per_s=chip.ici_one_way_bytes_per_s,
                    bidi_bytes_per_s=chip.ici_bidi_bytes_per_s if chip.torus else chip.ici_one_way_bytes_per_s,
                    hop_latency_s=chip.ici_hop_latency_s)
    rs = collectives.reduce_scatter(grad_bytes, ring).bandwidth_s if slice_chips > 1 else 0.0
    ag = collectives.all_gather(grad_bytes, ring).bandwidth_s if slice_chips > 1 else 0.0
    return ReductionTime(rs, dcn_all_reduce_s(grad_bytes / slice_chips, n_slices, chip), ag,
                         dcn_all_reduce_s(grad_bytes, n_slices, chip))


def model_reduction_time(cfg: TransformerConfig, n_slices: int, slice_chips: int, chip: hardware.Chip,
                         grad_dtype_bytes: int = 2) -> ReductionTime:
    """``reduction_time`` for the gradients of ``cfg`` (bf16 by default, as in the book)."""
    n_params = sum(math.prod(s.shape) for s in jax.tree.leaves(param_shapes(cfg)))
    return reduction_time(n_params * grad_dtype_bytes, n_slices, slice_chips, chip)
