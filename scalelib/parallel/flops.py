"""FLOPs one device executes in a training step, in the form every scheme's ``step_flops`` returns.

``pricing.layer_cost`` prices a layer the way book section 5 does: the MLP's D x F matrices only,
2 x tokens x weights forward and twice that backward. Each scheme's ``step_flops`` instead counts
what its executed step really computes on one device, so it can be held against XLA's
``compiled.cost_analysis()['flops']``:

* matmuls exactly (``scalelib.transformer_flops``: attention, MLP or experts, unembedding), with
  each scheme's own extras (a pipeline's recomputed stage forward, the experts' capacity slots);
* the Adam update: 13 FLOPs per parameter entry the device holds (``ADAM_FLOPS_PER_PARAM``);
* not the remaining elementwise work (norms, softmax, activations, residual adds, routing), which
  XLA counts too (1 FLOP per add, multiply, compare, select): the prediction sits just below XLA,
  by a share that shrinks as D, F and T grow.

XLA's cost analysis counts a while loop's body once and a conditional at its costliest branch;
``StepFlops.compiled_flops`` is what it should report, which differs from ``total_flops`` only for
a step whose work sits in such a loop (the pipeline's tick loop: ``PipelineFlops``).
"""

from __future__ import annotations

from dataclasses import dataclass

from scalelib import transformer_flops as fl

# train.adam_update per entry: mu = b1 m + (1 - b1) g (3); nu = b2 v + (1 - b2) g g (4);
# p - lr (mu / c1) / (sqrt(nu / c2) + eps) (6; the square root is a transcendental, not a FLOP).
ADAM_FLOPS_PER_PARAM = 13


def adam_flops(n_params: float) -> float:
    """FLOPs of ``train.adam_update`` on ``n_params`` entries (its few scalar FLOPs left out)."""
    return float(ADAM_FLOPS_PER_PARAM * n_params)


@dataclass(frozen=True)
class StepFlops:
    """One device's FLOPs in one training step: matmuls by component, and the Adam update."""

    matmuls: fl.FlopsBreakdown  # forward, backward and any recomputation
    adam_flops: float

    @property
    def total_flops(self) -> float:
        """Matmuls and Adam: everything but the elementwise work of the forward and backward."""
        return self.matmuls.matmul_flops + self.adam_flops

    @property
    def compiled_flops(self) -> float:
        """What XLA's ``cost_analysis`` should count for the compiled step (all of it, here)."""
        return self.total_flops

    @property
    def executed(self) -> StepFlops:
        """The work the device really does per step."""
        return StepFlops(self.matmuls, self.adam_flops)


@dataclass(frozen=True)
class PipelineFlops(StepFlops):
    """One stage's work in a pipelined step: M forward and M backward ops, and what XLA reports.

    ``matmuls`` is what the stage executes (idle ticks compute nothing); XLA counts the tick loop's
    body once, at its costliest op (a B op), plus Adam outside the loop.
    """

    forward_op: fl.FlopsBreakdown  # one F op on one microbatch
    backward_op: fl.FlopsBreakdown  # one B op: recompute + backward
    n_microbatches: int
    n_ticks: int

    @property
    def compiled_flops(self) -> float:
        return self.backward_op.matmul_flops + self.adam_flops

    @property
    def idle_ticks(self) -> int:
        """Ticks a stage runs no op: the bubble, 2 (S - 1) of the 2 (M + S - 1)."""
        return self.n_ticks - 2 * self.n_microbatches
