"""The one interface every training-parallelism scheme implements (book section 5).

A scheme is a frozen dataclass holding its settings (mesh axis names, ZeRO stage, microbatches,
...); its methods, all with the same signatures across schemes, say

* how it shards the state and the tokens, as data: ``param_rules`` / ``optimizer_rules`` map the
  model's logical axes (``scalelib.param_axes``) to mesh axes, ``token_spec`` splits the batch;
* its ``shard_map`` step: ``local_loss_and_grads`` is the per-device loss and gradients with the
  collectives written out; ``make_step`` and ``make_loss_and_grads`` wrap it the same way for all;
* what it predicts: ``predicted_collectives`` (held against the compiled HLO),
  ``predicted_memory`` (against ``memory_analysis``), ``step_flops`` (against ``cost_analysis``);
* its single-device reference (``reference_step``), which its step must equal;
* its terms in the book's per-layer cost model (class methods on a ``Layout``):
  ``layer_comms_s``, ``bubble_fraction``, ``state_shards`` and ``candidate_layouts``.

Adam runs on whatever layout the optimizer state has; ZeRO-1/2 update a slice of replicated
weights and gather it back (``params_to_update`` and ``after_update``).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import jax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, placement, train
from scalelib.parallel import specs
from scalelib.parallel.common import MeshShape, check_mesh_axes, nbytes, place
from scalelib.parallel.context import PlanContext
from scalelib.parallel.flops import StepFlops
from scalelib.parallel.layer import LayerModel, LayerTerms
from scalelib.parallel.layout import Layout
from scalelib.transformer import TransformerConfig

LocalFn = Callable[[Any, jax.Array], tuple[jax.Array, Any]]  # (params, tokens) -> (loss, grads), per device
Step = Callable[..., Any]


@dataclass(frozen=True)
class Collective:
    """One kind of collective a step should contain: ``count`` ops, each ``bytes_per_device`` big.

    Bytes are those of the op's result on one device (what ``scalelib.hlo.collective_ops`` reads).
    """

    kind: str  # a name from scalelib.collectives.KINDS
    axes: tuple[str, ...]
    bytes_per_device: int
    count: int = 1
    phase: str = "backward"  # "forward", "backward", "optimizer" or "loss": where the book places it

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_device * self.count


def sum_by_kind(collectives: Any) -> dict[tuple[str, tuple[str, ...] | None], int]:
    """Total bytes per (kind, axes): works for predictions and for ``hlo.collective_ops`` alike."""
    out: dict[tuple[str, tuple[str, ...] | None], int] = {}
    for c in collectives:
        total = c.total_bytes if isinstance(c, Collective) else c.result_bytes
        out[(c.kind, c.axes)] = out.get((c.kind, c.axes), 0) + total
    return out


@dataclass(frozen=True)
class MemoryPrediction:
    """Bytes one device holds for a step: state (params, Adam), gradients and its token batch."""

    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int  # mu, nu and the 4-byte step counter
    batch_bytes: int  # the device's tokens [rows, T+1] int32

    @property
    def argument_bytes(self) -> int:
        """What ``compiled.memory_analysis().argument_size_in_bytes`` should say: state + tokens."""
        return self.params_bytes + self.optimizer_bytes + self.batch_bytes


class Scheme(abc.ABC):
    """A training-parallelism scheme configured for a mesh (see the module docstring)."""

    name: ClassVar[str]  # the registry key, as a Layout names it
    section: ClassVar[str]  # where the book explains it
    check_vma: ClassVar[bool] = True  # False where the step sums replicated weights' gradients itself

    # ------------------------------------------------------------------ the mesh and the layout

    @property
    @abc.abstractmethod
    def mesh_axes(self) -> tuple[str, ...]:
        """The mesh axis names this scheme runs over, in mesh order."""

    def check_mesh(self, mesh_shape: MeshShape) -> None:
        """Raise a clear error unless the mesh has the axes this scheme runs over."""
        check_mesh_axes(mesh_shape, self.mesh_axes, f"{self.name} parallelism")

    def check_model(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> None:
        """Raise a clear error for a model this scheme cannot split over the mesh (default: any model)."""

    def check(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int | None = None,
              seq_len: int | None = None) -> None:
        """Raise a clear error for a mesh, model or batch [batch, seq_len + 1] this scheme cannot run."""
        self.check_mesh(mesh_shape)
        self.check_model(cfg, mesh_shape)
        if batch is not None or seq_len is not None:
            self.check_batch(batch or 0, seq_len or 0, mesh_shape)

    @abc.abstractmethod
    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        """How the weights are split: logical axes -> mesh axes (``scalelib.parallel.specs``)."""

    def optimizer_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        """How Adam's moments (and the gradients the update reads) are split; default: as the weights."""
        return self.param_rules(mesh_shape)

    def grad_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        """How the gradients a device holds at their largest are split (ZeRO-1 holds them whole)."""
        return self.optimizer_rules(mesh_shape)

    @abc.abstractmethod
    def token_spec(self, mesh_shape: MeshShape) -> P:
        """The PartitionSpec of the tokens [B, T+1] the step takes."""

    def param_specs(self, params: Any, mesh_shape: MeshShape) -> Any:
        """PartitionSpecs of ``params`` (arrays or ShapeDtypeStructs of ``model.init``)."""
        return specs.param_specs(params, self.param_rules(mesh_shape), mesh_shape)

    def optimizer_specs(self, params: Any, mesh_shape: MeshShape) -> Any:
        return specs.param_specs(params, self.optimizer_rules(mesh_shape), mesh_shape)

    def state_specs(self, params: Any, mesh_shape: MeshShape) -> train.TrainState:
        """PartitionSpecs of a ``train.TrainState`` over ``params``: weights, Adam moments, step count."""
        opt = self.optimizer_specs(params, mesh_shape)
        return train.TrainState(self.param_specs(params, mesh_shape), train.AdamState(P(), opt, opt))  # type: ignore[arg-type]

    def shard_inputs(self, state: train.TrainState, tokens: jax.Array,
                     mesh: jax.sharding.Mesh) -> tuple[train.TrainState, jax.Array]:
        """Place a state and tokens [B, T+1] on ``mesh`` as the step expects them."""
        shape = dict(mesh.shape)
        self.check_mesh(shape)
        self.check_batch(tokens.shape[0], tokens.shape[1] - 1, shape)
        return (place(state, mesh, self.state_specs(state.params, shape)),
                placement.put(tokens, NamedSharding(mesh, self.token_spec(shape))))

    def shard_params(self, params: Any, mesh: jax.sharding.Mesh) -> Any:
        """Place weights alone (for ``make_loss_and_grads``)."""
        return place(params, mesh, self.param_specs(params, dict(mesh.shape)))

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        """Raise unless tokens [batch, seq_len + 1] split as ``token_spec`` says (default: no check)."""

    # ------------------------------------------------------------------ the executed step

    def reference_step(self, cfg: TransformerConfig, hp: train.Adam = train.Adam()) -> Step:
        """The single-device step this scheme's step must equal."""
        return train.make_step(cfg, hp)

    @abc.abstractmethod
    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        """Per device, inside ``shard_map``: (params, tokens) -> (mean loss, grads), the loss the same on
        every device and the gradients laid out as ``optimizer_rules`` say, collectives written out."""

    def params_to_update(self, cfg: TransformerConfig, params: Any, mesh_shape: MeshShape) -> Any:
        """Per device: the weights Adam updates, in the optimizer's layout (default: as they are)."""
        return params

    def after_update(self, cfg: TransformerConfig, params: Any, mesh_shape: MeshShape) -> Any:
        """Per device: updated weights back in the weights' layout (default: as they are)."""
        return params

    def make_loss_and_grads(self, cfg: TransformerConfig, mesh: jax.sharding.Mesh) -> Step:
        """Jitted ``f(params, tokens) -> (loss, grads)``; place inputs with ``shard_params`` / ``token_spec``."""
        shape = dict(mesh.shape)
        self.check(cfg, shape)
        shapes = model.param_shapes(cfg)
        fn = compat.shard_map(self.local_loss_and_grads(cfg, shape), mesh=mesh,
                              in_specs=(self.param_specs(shapes, shape), self.token_spec(shape)),
                              out_specs=(P(), self.optimizer_specs(shapes, shape)), check_vma=self.check_vma)
        return jax.jit(fn)

    def make_step(self, cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam(), *,
                  return_grads: bool = False) -> Step:
        """Jitted ``step(state, tokens) -> (state, loss)``: the scheme's gradients, then Adam on each shard.

        With ``return_grads`` it returns ``(state, loss, grads)``, the gradients Adam applied (laid out
        as the optimizer state). Place inputs with ``shard_inputs``.
        """
        shape = dict(mesh.shape)
        self.check(cfg, shape)
        local_lg = self.local_loss_and_grads(cfg, shape)

        def local(state: train.TrainState, tokens: jax.Array) -> tuple[Any, ...]:
            loss, grads = local_lg(state.params, tokens)
            new, opt = train.adam_update(hp, grads, state.opt, self.params_to_update(cfg, state.params, shape))
            out = (train.TrainState(self.after_update(cfg, new, shape), opt), loss)
            return out + (grads,) if return_grads else out

        shapes = model.param_shapes(cfg)
        state_spec = self.state_specs(shapes, shape)
        out_specs = (state_spec, P()) + ((state_spec.opt.mu,) if return_grads else ())
        fn = compat.shard_map(local, mesh=mesh, in_specs=(state_spec, self.token_spec(shape)), out_specs=out_specs,
                              check_vma=self.check_vma)
        return jax.jit(fn)

    # ------------------------------------------------------------------ predictions

    @abc.abstractmethod
    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """Every collective one step runs, with its bytes per device."""

    def predicted_memory(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                         seq_len: int) -> MemoryPrediction:
        """Bytes per device, read off the layout: weights, gradients and Adam moments by their rules
        (the int32 step counter on every device), and the device's rows of tokens [T+1] int32."""
        self.check(cfg, mesh_shape, batch, seq_len)
        shapes = model.param_shapes(cfg)
        width = nbytes(jax.tree.leaves(shapes)[0]) // jax.tree.leaves(shapes)[0].size  # bytes per element

        def held(rules: specs.Rules) -> int:
            return width * specs.local_elements(shapes, specs.param_specs(shapes, rules, mesh_shape), mesh_shape)

        rows = batch // specs.shards(P(*self.token_spec(mesh_shape)[:1]), mesh_shape)
        moments = held(self.optimizer_rules(mesh_shape))
        return MemoryPrediction(held(self.param_rules(mesh_shape)), held(self.grad_rules(mesh_shape)),
                                2 * moments + 4, rows * (seq_len + 1) * 4)

    @abc.abstractmethod
    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> StepFlops:
        """FLOPs one device executes in one step (``scalelib.parallel.flops``)."""

    # ------------------------------------------------------------------ the book's per-layer model

    @classmethod
    @abc.abstractmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """Seconds of collectives in one layer's forward and backward pass on one chip (section 5)."""

    @classmethod
    def check_layer(cls, layout: Layout, layer: LayerModel) -> None:
        """Raise when the layout cannot hold this layer (default: any layer fits)."""

    @classmethod
    def bubble_fraction(cls, layout: Layout) -> float:
        """Share of a step each chip sits idle (a pipeline's bubble; default none)."""
        return 0.0

    @classmethod
    def state_shards(cls, layout: Layout, cfg: TransformerConfig) -> float:
        """Into how many pieces the training state (weights, gradients, Adam) is cut per chip."""
        return layout.model_ways * layout.stages

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        """Layouts of this scheme the planner should price for a run (default: none)."""
        return ()

    @classmethod
    def sweep_layout(cls, ctx: PlanContext, batch_tokens: float) -> tuple[Layout, float]:
        """For a figure over batch sizes: this scheme's layout at ``batch_tokens`` and the batch it runs
        (default: the first candidate layout, on the whole batch)."""
        layouts = cls.candidate_layouts(ctx)
        if not layouts:
            raise ValueError(f"the planner proposes no {cls.name!r} layout for {ctx.chips} chips of "
                             f"{ctx.chip.name}; plot another scheme")
        return layouts[0], batch_tokens

    @classmethod
    def plan_notes(cls, layout: Layout, ctx: PlanContext) -> tuple[str, ...]:
        """Remarks the planner adds to this scheme's plan (default: none)."""
        return ()
