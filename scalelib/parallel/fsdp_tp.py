"""Mixed FSDP x tensor parallelism on a 2D mesh (data X, model Y).

Book section 5.1.4 (Mixed FSDP and Tensor Parallelism):
In[B_X, D] . W_in[D_X, F_Y] . W_out[F_Y, D_X] -> Out[B_X, D]. Every weight is split both ways:
by the tensor-parallel rules over Y (heads, F) and by the FSDP rules over X on a remaining
dimension (``specs.tensor_rules`` then ``specs.fsdp_rules``), so no weight is stored twice.

* forward, per layer: AllGather_X of each weight's [.., D_X, F_Y] shard into [.., D, F_Y]
  (FSDP), then the tensor-parallel blocks with one AllReduce_Y of [B_X, T, D] each.
* backward, per layer: AllGather_X of the weights again (``blocks.REGATHER``), one AllReduce_Y of
  dIn[B_X, T, D] per block, and a ReduceScatter_X of each weight gradient.

FSDP moves weights (shrunk Y-fold by TP) and TP moves activations (shrunk X-fold by the batch
split): the book's reason for combining them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from scalelib import compat, model
from scalelib.parallel import specs
from scalelib.parallel.blocks import (REGATHER, check_heads_and_width, gathered_collectives, gathered_loss,
                                      sharded_step_flops, tensor_collectives, tensor_hooks)
from scalelib.parallel.common import MeshShape, check_batch, is_spec, nbytes
from scalelib.parallel.flops import StepFlops
from scalelib.parallel.layer import LayerTerms, fsdp_tp_comms_s
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.transformer import TransformerConfig


@register
@dataclass(frozen=True)
class FSDPTensor(Scheme):
    """FSDP over ``data_axis`` and tensor parallelism over ``model_axis`` at once."""

    name = "fsdp_tp"
    section = "5.1.4"

    data_axis: str = "data"
    model_axis: str = "model"

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return (self.data_axis, self.model_axis)

    def _sizes(self, mesh_shape: MeshShape) -> tuple[int, int]:
        return mesh_shape[self.data_axis], mesh_shape[self.model_axis]

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        check_batch(batch, self._sizes(mesh_shape)[0], self.data_axis)

    def check_model(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> None:
        check_heads_and_width(cfg, self._sizes(mesh_shape)[1])

    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.tensor_rules(self.model_axis) + specs.fsdp_rules(self.data_axis)

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P(self.data_axis)

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        x, _ = self._sizes(mesh_shape)
        data_axis, hooks = self.data_axis, tensor_hooks(self.model_axis)
        param_specs = self.param_specs(model.param_shapes(cfg), mesh_shape)

        def split(spec: P) -> bool:
            return specs.dim_of(spec, data_axis) is not None

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B/X, T+1] per device
            mine = jax.tree.map(lambda p, s: p if split(s) else compat.pvary(p, data_axis), params, param_specs)
            fn = jax.checkpoint(lambda s, t: gathered_loss(s, t, cfg, param_specs, data_axis, hooks), policy=REGATHER)
            loss, grads = jax.value_and_grad(fn)(mine, tokens)  # split grads arrive ReduceScattered over X
            g = jax.tree.map(lambda g, s: g / x if split(s) else lax.pmean(g, data_axis), grads, param_specs)
            return lax.pmean(loss, data_axis), g  # g on [.._X, .._Y] shards

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """FSDP's gathers / scatters on the Y-shards (over X) plus TP's 4 L AllReduces of [B/X, T, D] (over Y)."""
        self.check(cfg, mesh_shape, batch, seq_len)
        x, y = self._sizes(mesh_shape)
        out = tensor_collectives(cfg, self.model_axis, batch // x, seq_len)  # [B/X, T, D] per block and pass
        shapes = model.param_shapes(cfg)
        leaves = zip(jax.tree_util.tree_leaves_with_path(shapes),
                     jax.tree.leaves(self.param_specs(shapes, mesh_shape), is_leaf=is_spec))
        for (path, s), spec in leaves:
            local = nbytes(s) // (y if specs.dim_of(spec, self.model_axis) is not None else 1)  # gathered over X
            split = specs.dim_of(spec, self.data_axis) is not None
            out += gathered_collectives(path[0].key, local, split, cfg.n_layers, x, self.data_axis)
        return tuple(out) + (Collective("all_reduce", (self.data_axis,), 4, phase="loss"),)

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """As tensor parallelism on B / X sequences (gathering weights recomputes no matmul), Adam on the
        device's [.._X, .._Y] shards."""
        self.check(cfg, mesh_shape, batch, seq_len)
        x, y = self._sizes(mesh_shape)
        shapes = model.param_shapes(cfg)
        return sharded_step_flops(cfg, batch // x, seq_len, y,
                                  specs.local_elements(shapes, self.param_specs(shapes, mesh_shape), mesh_shape))

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        return fsdp_tp_comms_s(t)

    @classmethod
    def state_shards(cls, layout: Layout, cfg: TransformerConfig) -> float:
        return layout.model_ways * layout.stages * layout.data_ways

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        """The split of section 5.1.4 chosen for the whole batch on one slice."""
        return (Layout(cls.name, **ctx.mixed_axes(ctx.global_batch_tokens)),)

    @classmethod
    def sweep_layout(cls, ctx: PlanContext, batch_tokens: float) -> tuple[Layout, float]:
        """For a figure over batch sizes: the power-of-two split nearest the optimal FSDP degree of
        section 5.1.4, and the batch of the chips it uses."""
        layout = Layout(cls.name, **ctx.optimal_axes(batch_tokens))
        return layout, batch_tokens / ctx.chips * layout.chips
