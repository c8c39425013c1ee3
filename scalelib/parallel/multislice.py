"""Data parallelism across slices: a fast level (ICI, inside a slice) and a slow one (DCN, between).

Book section 5 (training on several pods: data parallelism over the data-centre network) with
the collectives of section 3. Mesh ("slice", "data"): S slices of X chips; the batch is split
over both axes and the weights are replicated. Forward: no communication. Backward, per
gradient array, a hierarchical AllReduce:

1. ReduceScatter over ``data`` (ICI): each chip ends with 1/X of its slice's sum (the array is
   cut along the dimension FSDP would split, ``specs.fsdp_rules``);
2. AllReduce over ``slice`` (DCN) of that 1/X shard only: the slow network carries X times
   fewer bytes than AllReducing whole gradients across slices;
3. AllGather over ``data`` (ICI) of the fully reduced shards.

``reduction_time`` prices the three steps with a ``hardware.Chip``: ICI by
``scalelib.collectives`` on a ring of X chips, DCN as 2 (S - 1) / S x bytes over the chip's share
of its host's DCN bandwidth (``Chip.dcn_bytes_per_s_per_chip``), against the flat alternative.
The planner's "multislice" layout is FSDP (x TP) inside each slice with this reduction over DCN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from scalelib import collectives, compat, hardware, model
from scalelib import transformer_flops as fl
from scalelib.parallel import thresholds, specs
from scalelib.parallel.common import MeshShape, check_batch, is_spec, local_grads, n_elements, \
    nbytes
from scalelib.parallel.flops import StepFlops, adam_flops
from scalelib.parallel.layer import LayerTerms, fsdp_tp_comms_s
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.topology import RingAxis
from scalelib.transformer import TransformerConfig
from scalelib.validate import non_negative, positive_int

AXES = ("slice", "data")


@register
@dataclass(frozen=True)
class Multislice(Scheme):
    """Data parallelism over S slices x X chips with a hierarchical gradient AllReduce."""

    name = "multislice"
    section = "5.1.6"

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return AXES

    def _sizes(self, mesh_shape: MeshShape) -> tuple[int, int]:
        return mesh_shape["slice"], mesh_shape["data"]

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        s_, x = self._sizes(mesh_shape)
        check_batch(batch, s_ * x, AXES)


    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.REPLICATED

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P(AXES)

    def _reduce_dims(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> Any:
        """Each gradient's dimension cut by the ICI ReduceScatter (-1: AllReduced whole)."""
        cut = specs.param_specs(model.param_shapes(cfg), specs.fsdp_rules("data"), mesh_shape)
        return jax.tree.map(lambda s: -1 if specs.dim_of(s, "data") is None else specs.dim_of(s, "data"), cut,
                            is_leaf=is_spec)

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        s_, x = self._sizes(mesh_shape)
        dims = self._reduce_dims(cfg, mesh_shape)

        def reduce(g: jax.Array, d: int) -> jax.Array:  # g: this chip's gradient, the full array
            if d < 0:  # nothing divides: one flat AllReduce over both levels
                return lax.psum(g, AXES) / (s_ * x)
            shard = lax.psum_scatter(g, "data", scatter_dimension=d, tiled=True)  # ICI ReduceScatter -> [.., D/X, ..]
            shard = lax.psum(shard, "slice")  # DCN AllReduce of the shard only
            return compat.all_gather_invariant(shard, "data", axis=d, tiled=True) / (s_ * x)  # ICI AllGather

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B/(S X), T+1] per chip
            mine = compat.pvary(params, AXES)
            loss, grads = local_grads(lambda p, t: model.loss(p, t, cfg), mine, tokens, 1, AXES)
            return lax.pmean(loss, AXES), jax.tree.map(reduce, grads, dims)

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """Per gradient array: ReduceScatter_data, AllReduce_slice of the 1/X shard, AllGather_data."""
        self.check(cfg, mesh_shape, batch, seq_len)
        _, x = self._sizes(mesh_shape)
        out = []
        for s, d in zip(jax.tree.leaves(model.param_shapes(cfg)), jax.tree.leaves(self._reduce_dims(cfg, mesh_shape))):
            full = nbytes(s)
            if d < 0:
                out.append(Collective("all_reduce", AXES, full))
            else:
                out += [Collective("reduce_scatter", ("data",), full // x),
                        Collective("all_reduce", ("slice",), full // x), Collective("all_gather", ("data",), full)]
        return tuple(out) + (Collective("all_reduce", AXES, 4, phase="loss"),)

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """Per chip: the single-device step on B / (S X) sequences and Adam on all the weights."""
        s_, x = self._sizes(mesh_shape)
        if batch % (s_ * x):
            raise ValueError(f"batch {batch} must be a multiple of the {s_ * x} chips of mesh {dict(mesh_shape)}")
        return StepFlops(fl.train_flops(cfg, batch // (s_ * x), seq_len, moe_compute="dense"),
                         adam_flops(n_elements(model.param_shapes(cfg))))

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """FSDP (x TP) inside each slice; each chip's gradient shard AllReduced over DCN during the
        backward, alongside the ICI traffic (a different network)."""
        forward, backward = fsdp_tp_comms_s(t)
        lay = t.layout
        if lay.slices > 1:
            shard = t.weight_bytes / (lay.data_ways * lay.model_ways)
            backward = max(backward, t.dcn_time_s("all_reduce", shard))
        return forward, backward

    @classmethod
    def state_shards(cls, layout: Layout, cfg: TransformerConfig) -> float:
        return layout.model_ways * layout.stages * layout.data_ways

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        """With several slices: each takes 1 / slices of the batch, FSDP alone when that keeps a slice
        compute-bound, else the FSDP x TP split for that share."""
        if ctx.slices == 1:
            return ()
        per_slice = ctx.global_batch_tokens / ctx.slices
        threshold = thresholds.dp_critical_batch_per_chip_tokens(ctx.chip, ctx.n_axes)
        inner = ctx.mixed_axes(per_slice) if per_slice / ctx.chips < threshold else {"data_axes": ctx.axes}
        return (Layout(cls.name, slices=ctx.slices, **inner),)


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
    positive_int("n_slices", n_slices)
    positive_int("slice_chips", slice_chips)
    non_negative("grad_bytes", grad_bytes)
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
    return reduction_time(n_elements(model.param_shapes(cfg)) * grad_dtype_bytes, n_slices, slice_chips, chip)
