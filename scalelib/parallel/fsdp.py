"""ZeRO sharding, stages 1, 2 and 3 (FSDP): data parallelism without the duplicated state.

Book section 5.1.2 (Fully-Sharded Data Parallelism): In[B_X, D] . W_in[D_X, F] . W_out[F, D_X].
An AllReduce is a ReduceScatter followed by an AllGather, so the same bytes can leave each
device with the state split X ways:

* stage 1 (optimizer state sharded): backward AllReduces full gradients; each device updates its
  1/X slice of (params, mu, nu); an AllGather rebuilds the full weights for the next step.
* stage 2 (+ gradients): backward ReduceScatters the gradients instead, so each device only ever
  keeps its reduced slice; the same AllGather of the updated weights follows.
* stage 3 (+ weights, "FSDP"): weights live sharded. Forward: AllGather each layer's weights
  just before use. Backward: AllGather them again (``blocks.REGATHER`` drops the gathered
  weights after the forward) and ReduceScatter each weight gradient, which is exactly the
  transpose JAX derives for the forward's tiled ``all_gather``.

Sharding rule (``specs.fsdp_rules``): each array is split once, the embeddings along V, the MLP
weights along F and the rest along D (else a head axis), wherever the axis size divides it; an
array nothing divides stays replicated and its gradient is AllReduced. ``make_jit_step`` is the
same FSDP through ``jax.jit`` and NamedShardings, leaving XLA's partitioner to insert the collectives.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, train
from scalelib import transformer_flops as fl
from scalelib.parallel import specs
from scalelib.parallel.blocks import REGATHER, gathered_collectives, gathered_loss
from scalelib.parallel.common import MeshShape, axes_size, check_batch, is_spec, local_grads, nbytes
from scalelib.parallel.flops import StepFlops, adam_flops
from scalelib.parallel.layer import LayerTerms
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme, Step
from scalelib.transformer import TransformerConfig

STAGES = (1, 2, 3)


@register
@dataclass(frozen=True)
class FSDP(Scheme):
    """ZeRO-``stage`` over one mesh axis: optimizer state (1), + gradients (2), + weights (3) sharded."""

    name = "fsdp"
    section = "5.1.2"

    stage: int = 3
    axis: str = "data"

    def __post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"ZeRO stage must be one of {STAGES} (1: optimizer state, 2: + gradients, "
                             f"3: + weights), got {self.stage!r}")

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return (self.axis,)

    def check_mesh(self, mesh_shape: MeshShape) -> None:
        axes_size(mesh_shape, self.axis)

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        check_batch(batch, axes_size(mesh_shape, self.axis), self.axis)


    def optimizer_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.fsdp_rules(self.axis)

    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return self.optimizer_rules(mesh_shape) if self.stage == 3 else specs.REPLICATED

    def grad_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.REPLICATED if self.stage == 1 else self.optimizer_rules(mesh_shape)

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P(self.axis)

    def _dims(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> Any:
        """Tree like the params: each array's dimension split over the axis, -1 for a replicated one."""
        opt = specs.param_specs(model.param_shapes(cfg), self.optimizer_rules(mesh_shape), mesh_shape)
        return jax.tree.map(lambda s: -1 if specs.dim_of(s, self.axis) is None else specs.dim_of(s, self.axis), opt,
                            is_leaf=is_spec)

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        axis, n = self.axis, axes_size(mesh_shape, self.axis)
        dims = self._dims(cfg, mesh_shape)
        opt_specs = specs.param_specs(model.param_shapes(cfg), self.optimizer_rules(mesh_shape), mesh_shape)

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B/X, T+1] per device
            vary = lambda p, d: compat.pvary(p, axis) if (d < 0 or self.stage < 3) else p  # noqa: E731
            mine = jax.tree.map(vary, params, dims)  # gradients below are this device's alone
            if self.stage == 3:
                fn = jax.checkpoint(lambda s, t: gathered_loss(s, t, cfg, opt_specs, axis), policy=REGATHER)
                loss, grads = jax.value_and_grad(fn)(mine, tokens)  # grads come back ReduceScattered
                g = jax.tree.map(lambda g, d: g / n if d >= 0 else lax.pmean(g, axis), grads, dims)
            else:
                loss, grads = local_grads(lambda p, t: model.loss(p, t, cfg), mine, tokens, 1, (axis,))
                if self.stage == 1:  # AllReduce, then keep my slice
                    g = jax.tree.map(lambda g, d: self._my_slice(lax.pmean(g, axis), d, n), grads, dims)
                else:  # ReduceScatter: only my slice of the sum ever exists
                    g = jax.tree.map(lambda g, d: lax.pmean(g, axis) if d < 0 else
                                     lax.psum_scatter(g, axis, scatter_dimension=d, tiled=True) / n, grads, dims)
            return lax.pmean(loss, axis), g

        return local

    def _my_slice(self, x: jax.Array, d: int, n: int) -> jax.Array:
        """This device's 1/X of a replicated array along dimension d (d < 0: all of it)."""
        return x if d < 0 else lax.dynamic_slice_in_dim(x, lax.axis_index(self.axis) * (x.shape[d] // n),
                                                        x.shape[d] // n, d)

    def params_to_update(self, cfg: TransformerConfig, params: Any, mesh_shape: MeshShape) -> Any:
        """Stages 1 and 2 update only this device's slice of the replicated weights."""
        if self.stage == 3:
            return params
        n = axes_size(mesh_shape, self.axis)
        return jax.tree.map(lambda x, d: self._my_slice(x, d, n), params, self._dims(cfg, mesh_shape))

    def after_update(self, cfg: TransformerConfig, params: Any, mesh_shape: MeshShape) -> Any:
        """Stages 1 and 2 AllGather the updated slices back into full replicated weights."""
        if self.stage == 3:
            return params
        return jax.tree.map(lambda w, d: w if d < 0 else compat.all_gather_invariant(w, self.axis, axis=d, tiled=True),
                            params, self._dims(cfg, mesh_shape))

    def make_jit_step(self, cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam()) -> Step:
        """FSDP the compiler's way: ``train.make_step`` under jit, state sharded by NamedSharding.

        Use an ``auto`` mesh (compat.make_mesh(..., kind="auto")): XLA's partitioner chooses where
        to AllGather weights and how to reduce gradients; compare its HLO with ``make_step``'s.
        """
        shapes, shape = model.param_shapes(cfg), dict(mesh.shape)
        spec = FSDP(3, self.axis).state_specs(shapes, shape)
        shard = jax.tree.map(lambda s: NamedSharding(mesh, s), spec, is_leaf=is_spec)
        return jax.jit(train.make_step(cfg, hp), in_shardings=(shard, NamedSharding(mesh, P(self.axis))),
                       out_shardings=(shard, NamedSharding(mesh, P())))

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """Per array: stage 1 AllReduce + AllGather, stage 2 ReduceScatter + AllGather, stage 3 per layer
        AllGather (forward), AllGather again (backward, all but the embedding, whose gradient is a
        scatter-add that never reads it) and ReduceScatter; replicated arrays AllReduce; + the loss."""
        self.check(cfg, mesh_shape, batch, seq_len)
        n, ax, out = axes_size(mesh_shape, self.axis), (self.axis,), []
        shapes = model.param_shapes(cfg)
        opt = specs.param_specs(shapes, self.optimizer_rules(mesh_shape), mesh_shape)
        for (path, s), spec in zip(jax.tree_util.tree_leaves_with_path(shapes), jax.tree.leaves(opt, is_leaf=is_spec)):
            full, split = nbytes(s), specs.dim_of(spec, self.axis) is not None
            if self.stage == 3 or not split:
                out += gathered_collectives(path[0].key, full, split, cfg.n_layers, n, self.axis)
            else:
                first = Collective("all_reduce", ax, full) if self.stage == 1 else \
                    Collective("reduce_scatter", ax, full // n)
                out += [first, Collective("all_gather", ax, full, phase="optimizer")]
        return tuple(out) + (Collective("all_reduce", ax, 4, phase="loss"),)

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """The single-device step on B / X sequences (regathering weights recomputes no matmul) and Adam
        on the device's slice of every array."""
        self.check(cfg, mesh_shape, batch, seq_len)
        shapes = model.param_shapes(cfg)
        held = specs.local_elements(shapes, self.optimizer_specs(shapes, mesh_shape), mesh_shape)
        local = batch // axes_size(mesh_shape, self.axis)
        return StepFlops(fl.train_flops(cfg, local, seq_len, moe_compute="dense"), adam_flops(held))

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """Forward: AllGather V_w; backward: ReduceScatter V_w and AllGather it again (data axes)."""
        forward = t.time_s("all_gather", t.weight_bytes, t.layout.data_axes)
        return forward, t.time_s("reduce_scatter", t.weight_bytes, t.layout.data_axes) + forward

    @classmethod
    def state_shards(cls, layout: Layout, cfg: TransformerConfig) -> float:
        return layout.model_ways * layout.stages * layout.data_ways

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        return (Layout(cls.name, data_axes=ctx.axes),)
