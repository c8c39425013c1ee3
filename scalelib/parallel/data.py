"""Pure data parallelism: the batch is split over devices, every device holds all the weights.

Book section 5.1.1 (Data Parallelism): In[B_X, D] . W_in[D, F] . W_out[F, D] -> Out[B_X, D].

* forward: no communication at all; each device runs the whole model on its B/X sequences.
* backward: one AllReduce (``lax.pmean``) of every weight gradient over the data axis, off the
  critical path (any time before the optimizer needs it). The loss is also averaged (a
  4-byte AllReduce) so every device reports the global mean.

Gradient accumulation (``microbatches > 1``) runs the local batch as M slices in a ``lax.scan``
and sums their gradients before the one AllReduce: communication stays the same per step while
activation memory drops to one microbatch. ``remat`` and ``scan_layers`` go to ``model.loss``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
from jax import lax
from jax.sharding import PartitionSpec as P

from scalelib import compat, model
from scalelib import transformer_flops as fl
from scalelib.parallel import specs
from scalelib.parallel.common import Axes, MeshShape, as_axes, axes_size, check_batch, local_grads, n_elements, \
    nbytes
from scalelib.parallel.flops import StepFlops, adam_flops
from scalelib.parallel.layer import LayerTerms
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.transformer import REMAT_POLICIES, RematPolicy, TransformerConfig
from scalelib.validate import positive_int


@register
@dataclass(frozen=True)
class DataParallel(Scheme):
    """Data parallelism over ``axes`` (one mesh axis or several), with gradient accumulation."""

    name = "data"
    section = "5.1.1"

    axes: Axes = "data"
    microbatches: int = 1
    remat: RematPolicy = "none"
    scan_layers: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", as_axes(self.axes))
        object.__setattr__(self, "microbatches", positive_int("microbatches", self.microbatches))
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat must be one of {REMAT_POLICIES}, got {self.remat!r}")

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return as_axes(self.axes)

    def check_mesh(self, mesh_shape: MeshShape) -> None:
        axes_size(mesh_shape, self.axes)  # the data axes must exist; other axes hold copies

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        check_batch(batch, axes_size(mesh_shape, self.axes), self.axes, self.microbatches)


    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return specs.REPLICATED

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P(as_axes(self.axes))

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        axes, n = as_axes(self.axes), axes_size(mesh_shape, self.axes)

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B/X, T+1] per device
            check_batch(tokens.shape[0] * n, n, axes, self.microbatches)
            # pvary makes the weights "varying": their gradient is this device's alone (no implicit
            # sum), so the AllReduce below is the only one in the program.
            mine = compat.pvary(params, axes)
            loss_fn = lambda p, t: model.loss(p, t, cfg, remat=self.remat, scan_layers=self.scan_layers)  # noqa: E731
            loss, grads = local_grads(loss_fn, mine, tokens, self.microbatches, axes)
            grads = jax.tree.map(lambda g: lax.pmean(g, axes), grads)  # AllReduce over X: the only collective
            return lax.pmean(loss, axes), grads  # [] global mean loss

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """One AllReduce per weight array (its full size: weights are replicated) and one for the loss.

        Independent of batch and microbatches: accumulation communicates once per step.
        """
        self.check(cfg, mesh_shape, batch, seq_len)
        axes = as_axes(self.axes)
        out = [Collective("all_reduce", axes, nbytes(x)) for x in jax.tree.leaves(model.param_shapes(cfg))]
        return tuple(out) + (Collective("all_reduce", axes, 4, phase="loss"),)

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """The single-device step on B / X sequences (its remat included) and Adam on every weight."""
        self.check(cfg, mesh_shape, batch, seq_len)
        local = batch // axes_size(mesh_shape, self.axes)
        matmuls = fl.train_flops(cfg, local, seq_len, remat=self.remat, moe_compute="dense")
        return StepFlops(matmuls, adam_flops(n_elements(model.param_shapes(cfg))))

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """Backward: AllReduce of V_w over the data axes; forward: nothing."""
        return 0.0, t.time_s("all_reduce", t.weight_bytes, t.layout.data_axes)

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        return (Layout(cls.name, data_axes=ctx.axes),)
