"""Megatron tensor parallelism, optionally with data parallelism on a second mesh axis.

Book section 5.1.3 (Tensor Parallelism): In[B, D] . W_in[D, F_Y] . W_out[F_Y, D] -> Out[B, D].
The book keeps activations D-sharded between blocks (AllGather in, ReduceScatter out); here
they stay replicated over Y between blocks, Megatron's form of the same thing, whose two
collectives fuse into one AllReduce (an AllReduce = ReduceScatter + AllGather, section 3):

* MLP: W_gate / W_up column-parallel [D, F_Y], W_down row-parallel [F_Y, D]; each device makes
  a partial Out[B, D]{U_Y}. Forward: one AllReduce (psum) of the block output.
  Backward: one AllReduce of dIn[B, D]{U_Y}: the transpose of ``compat.pvary`` (a psum)
  applied once to the normalized block input (Megatron's "f" operator; the psum is its "g").
  Both sit in ``blocks.tensor_hooks``, so the blocks themselves are ``scalelib.model``'s.
* attention: heads sharded, W_Q [D, N_Y, H], W_K / W_V [D, K_Y, H], W_O [N_Y, H, D]; the same
  one AllReduce forward and one backward per block. Query head n uses KV head n // (N / K), so
  contiguous head shards stay aligned only if Y divides n_kv_heads. When it does not, the KV
  heads would have to be replicated on every device (and their gradients AllReduced); this
  module does not do that and raises instead.

Norm scales, embedding and unembedding are replicated over Y (the logits are computed whole on
every device). On a 2D mesh (data, model) the batch is split over ``data`` and the gradients
are AllReduced over it as in ``scalelib.parallel.data``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from scalelib import compat, model
from scalelib.parallel import specs
from scalelib.parallel.blocks import check_heads_and_width, sharded_step_flops, tensor_collectives, tensor_hooks
from scalelib.parallel.common import MeshShape, check_batch, is_spec, nbytes
from scalelib.parallel.flops import StepFlops
from scalelib.parallel.layer import LayerTerms
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.transformer import TransformerConfig


@register
@dataclass(frozen=True)
class TensorParallel(Scheme):
    """Tensor parallelism over ``model_axis``, data parallelism over ``data_axis`` (None: none)."""

    name = "tensor"
    section = "5.1.3"

    model_axis: str = "model"
    data_axis: str | None = "data"

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return (self.model_axis,) if self.data_axis is None else (self.data_axis, self.model_axis)

    def _sizes(self, mesh_shape: MeshShape) -> tuple[int, int]:
        """(X, Y): devices along the data axis (1 without one) and along the model axis."""
        return (mesh_shape[self.data_axis] if self.data_axis else 1), mesh_shape[self.model_axis]

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        check_batch(batch, self._sizes(mesh_shape)[0], self.data_axis or self.model_axis)

    def check_model(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> None:
        check_heads_and_width(cfg, self._sizes(mesh_shape)[1])

    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.tensor_rules(self.model_axis)

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P(self.data_axis)

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        hooks, data_axis = tensor_hooks(self.model_axis), self.data_axis

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B/X, T+1] per device
            mine = params if data_axis is None else compat.pvary(params, data_axis)
            fn = lambda p, t: model.stack_loss(cfg, p, lambda i: model.layer_params(p, i), t, hooks)  # noqa: E731
            loss, grads = jax.value_and_grad(fn)(mine, tokens)
            if data_axis is not None:  # data parallelism: AllReduce gradients and loss over X
                grads, loss = jax.tree.map(lambda g: lax.pmean(g, data_axis), (grads, loss))
            return loss, grads

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """2 L AllReduces of [B/X, T, D] forward and 2 L backward over the model axis; with a data axis,
        one AllReduce per weight array (its 1/Y shard) and one for the loss over data."""
        self.check(cfg, mesh_shape, batch, seq_len)
        x, _ = self._sizes(mesh_shape)
        out = tensor_collectives(cfg, self.model_axis, batch // x, seq_len)  # [B/X, T, D] per block and pass
        if self.data_axis is not None:
            shapes = model.param_shapes(cfg)
            split = jax.tree.leaves(self.param_specs(shapes, mesh_shape), is_leaf=is_spec)
            leaves = zip(jax.tree.leaves(shapes), split)
            out += [Collective("all_reduce", (self.data_axis,), nbytes(s) // specs.shards(p, mesh_shape))
                    for s, p in leaves]
            out.append(Collective("all_reduce", (self.data_axis,), 4, phase="loss"))
        return tuple(out)

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        self.check(cfg, mesh_shape, batch, seq_len)
        x, y = self._sizes(mesh_shape)
        shapes = model.param_shapes(cfg)
        return sharded_step_flops(cfg, batch // x, seq_len, y,
                                  specs.local_elements(shapes, self.param_specs(shapes, mesh_shape), mesh_shape))

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """Each pass: AllGather and ReduceScatter of V_a over the model axes (the book's D-sharded form)."""
        each = t.time_s("all_gather", t.activation_bytes, t.layout.model_axes) + \
            t.time_s("reduce_scatter", t.activation_bytes, t.layout.model_axes)
        return each, each

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        return (Layout(cls.name, model_axes=ctx.axes),)
