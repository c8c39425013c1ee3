"""FLOPs one device executes in a training step of the pipeline, expert and multislice schemes.

``cost.layer_cost`` prices a layer the way book section 5 does: the MLP's D x F matrices only,
2 x tokens x weights forward and twice that backward. This module counts what the executed
steps of ``scalelib.parallel`` really compute on one device, so each can be held against XLA's
``compiled.cost_analysis()['flops']``:

* matmuls exactly (``scalelib.transformer_flops``: attention, MLP or experts, unembedding), with
  each scheme's own extras: the pipeline's recomputed stage forward, the experts' capacity slots
  and their one-hot dispatch and combine;
* the Adam update: 13 FLOPs per parameter entry the device holds (``ADAM_FLOPS_PER_PARAM``);
* not the remaining elementwise work (norms, softmax, activations, residual adds, routing), which
  XLA counts too (1 FLOP per add, multiply, compare, select): the prediction sits just below XLA,
  by a share that shrinks as D, F and T grow.

Pipeline (section 5.1.5). ``pipeline.make_loss_and_grads`` runs one ``lax.switch`` per tick: an idle
tick runs the empty branch, so the bubble costs time but no FLOPs, and a stage executes M forward
ops and M backward ops per step. A backward op recomputes the stage's forward from its stored
input and differentiates it (1 + 2 = 3 forwards' worth), and it evaluates the head (final norm,
unembedding, loss) on every stage, since ``jnp.where(last, head, ...)`` computes both sides.
XLA's cost analysis counts a while loop's body once and a conditional at its costliest branch, so
for the whole step it reports one backward op (plus what lies outside the loop: Adam), whatever M.

Experts (section 4.4.1). Each device runs its E / X experts on the X C slots it receives (C =
``expert.capacity``), E C slots in all: the routed count n k when the capacity factor is 1, more
when it is larger. Dispatch and combine are one-hot einsums of 2 n E C D FLOPs each; the
dispatch mask has no gradient (it comes from integer indices), so its einsum is differentiated
for the tokens only (2x in all), the combine for both operands (3x).

Multislice (section 5.1.6) is data parallelism over S X chips: each computes the full step on its
B / (S X) sequences and runs Adam on every (replicated) weight.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import jax

from scalelib import transformer_flops as fl
from scalelib.parallel import expert, multislice, pipeline
from scalelib.parallel.data import param_shapes
from scalelib.transformer import TransformerConfig, mlp_params_per_expert

# train.adam_update per entry: mu = b1 m + (1 - b1) g (3); nu = b2 v + (1 - b2) g g (4);
# p - lr (mu / c1) / (sqrt(nu / c2) + eps) (6; the square root is a transcendental, not a FLOP).
ADAM_FLOPS_PER_PARAM = 13


@dataclass(frozen=True)
class StepFlops:
    """One device's FLOPs in one training step: matmuls by component, and the Adam update."""

    matmuls: fl.FlopsBreakdown  # forward, backward and any recomputation
    adam_flops: float

    @property
    def total_flops(self) -> float:
        """Matmuls and Adam: everything but the elementwise work of the forward and backward."""
        return self.matmuls.matmul_flops + self.adam_flops


@dataclass(frozen=True)
class PipelineFlops:
    """One stage's work in a pipelined step: its ops, how often they run, and what XLA reports."""

    forward_op: fl.FlopsBreakdown  # one F op: the stage's layers on one microbatch
    backward_op: fl.FlopsBreakdown  # one B op: recompute + backward of the stage and of the head
    n_microbatches: int
    n_ticks: int
    adam_flops: float  # on the stage's own layers and the replicated embedding, norm, unembedding

    @property
    def executed(self) -> StepFlops:
        """What a stage computes per step: M F ops and M B ops; idle ticks compute nothing."""
        return StepFlops((self.forward_op + self.backward_op).scaled(self.n_microbatches), self.adam_flops)

    @property
    def compiled_flops(self) -> float:
        """XLA's ``cost_analysis`` count: the tick loop's body once, at its costliest op (a B op)."""
        return self.backward_op.matmul_flops + self.adam_flops

    @property
    def idle_ticks(self) -> int:
        """Ticks a stage runs no op: the bubble, 2 (S - 1) of the 2 (M + S - 1)."""
        return self.n_ticks - 2 * self.n_microbatches


def adam_flops(n_params: float) -> float:
    """FLOPs of ``train.adam_update`` on ``n_params`` entries (its few scalar FLOPs left out)."""
    return float(ADAM_FLOPS_PER_PARAM * n_params)


def _n_params(shapes) -> int:
    return sum(math.prod(s.shape) for s in jax.tree.leaves(shapes))


def multislice_step_flops(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int,
                          seq_len: int) -> StepFlops:
    """Per chip: the single-device step on B / (S X) sequences and Adam on all the weights."""
    s_, x = multislice._sizes(mesh_shape)
    if batch % (s_ * x):
        raise ValueError(f"batch {batch} must be a multiple of the {s_ * x} chips of mesh {dict(mesh_shape)}")
    return StepFlops(fl.train_flops(cfg, batch // (s_ * x), seq_len), adam_flops(_n_params(param_shapes(cfg))))


def pipeline_step_flops(cfg: TransformerConfig, n_stages: int, batch: int, seq_len: int, n_microbatches: int,
                        kind: pipeline.Kind = "1f1b") -> PipelineFlops:
    """Per stage, for ``pipeline.make_step(cfg, mesh, n_microbatches, kind)`` on a [B, T+1] batch."""
    pipeline._check(cfg, n_stages, batch, n_microbatches)
    stage = cfg.replace(n_layers=cfg.n_layers // n_stages)  # [L/S, ...] layers on each stage
    tokens = batch // n_microbatches * seq_len  # one microbatch, b T tokens
    forward = fl.forward_flops(stage, tokens, seq_len, include_unembed=False)
    backward = fl.forward_flops(stage, tokens, seq_len).scaled(3.0)  # recompute 1x + backward 2x, head included
    shapes = param_shapes(cfg)
    layers = _n_params(shapes["layers"])
    return PipelineFlops(forward, backward, n_microbatches, pipeline.schedule(kind, n_stages, n_microbatches).n_ticks,
                         adam_flops(_n_params(shapes) - layers + layers // n_stages))


def expert_step_flops(cfg: TransformerConfig, n_devices: int, batch: int, seq_len: int,
                      capacity_factor: float) -> StepFlops:
    """Per device, for ``expert.make_step(cfg, mesh, capacity_factor)`` over ``n_devices``.

    ``mlp_flops`` holds the routed experts on their E C slots and any shared experts on the n
    local tokens; ``router_flops`` holds the router and the dispatch and combine einsums.
    """
    expert._check(cfg, n_devices, batch)
    n = batch // n_devices * seq_len  # local tokens
    cap = expert.capacity(n, cfg.n_experts, cfg.experts_per_token, capacity_factor)
    d, e, L = cfg.d_model, cfg.n_experts, cfg.n_layers
    dense = fl.forward_flops(cfg.replace(n_experts=0, experts_per_token=0, n_shared_experts=0), n, seq_len)
    mlp = L * 2 * (e * cap + n * cfg.n_shared_experts) * mlp_params_per_expert(cfg)  # [E, C] slots + shared
    router = L * 2 * n * d * e
    one_hot = L * 2 * n * e * cap * d  # dispatch [n, E, C] x [n, D] -> [E, C, D]; the combine alike
    fwd = fl.FlopsBreakdown(mlp, dense.attn_proj_flops, dense.attn_qk_flops, dense.attn_av_flops,
                            router + 2 * one_hot, dense.unembed_flops)
    train = fwd.scaled(3.0) + fl.FlopsBreakdown(0, 0, 0, 0, -one_hot, 0)  # the dispatch's mask has no gradient
    shapes = param_shapes(cfg)
    experts = sum(_n_params(shapes["layers"][k]) for k in expert.EXPERT_WEIGHTS if k in shapes["layers"])
    return StepFlops(train, adam_flops(_n_params(shapes) - experts + experts // n_devices))
