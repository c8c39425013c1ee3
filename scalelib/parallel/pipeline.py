"""Pipeline parallelism over a "stage" mesh axis: GPipe and 1F1B schedules, executed for real.

Book section 5.1.5 (Pipelining). The L stacked layers are split into S equal stages (the params'
leading L axis is sharded over ``stage``: the rule ``("layers", stage)``); the batch is cut into M
microbatches that travel stage to stage. Forward: each tick, activations [b, T, D] move one hop
up with a ``ppermute`` (collective-permute). Backward: the gradients w.r.t. those activations
move one hop down with a second ``ppermute``. At the end the gradients of the replicated weights
(embedding, final norm, unembedding) and the loss are summed over stages with one ``psum``.

``scalelib.parallel.schedule`` is the pure timetable (which stage runs F or B of which microbatch
at each tick); the step executes any such timetable under ``shard_map``: an F op stores its input
and sends its output on, a B op recomputes the stage from that stored input and takes its
``jax.vjp`` (full rematerialisation of the stage; the stored inputs live in an [M, b, T, D]
buffer, of which ``Schedule.peak_in_flight`` slots are ever live: M for GPipe, at most S for
1F1B). Idle ticks are the bubble: (S - 1) / (M + S - 1) of each stage's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

from scalelib import model
from scalelib import transformer_flops as fl
from scalelib.parallel import thresholds, specs
from scalelib.parallel.common import MeshShape, is_spec, nbytes
from scalelib.parallel.flops import PipelineFlops, adam_flops
from scalelib.parallel.layer import LayerModel, LayerTerms
from scalelib.parallel.layout import Layout
from scalelib.parallel.context import PlanContext
from scalelib.parallel.registry import register
from scalelib.parallel.schedule import KINDS, Kind, schedule
from scalelib.parallel.scheme import Collective, LocalFn, Scheme
from scalelib.roofline import comms_time_s
from scalelib.transformer import TransformerConfig
from scalelib.validate import positive_int


@register
@dataclass(frozen=True)
class Pipeline(Scheme):
    """``microbatches`` microbatches through the stages of ``axis`` in the ``kind`` order."""

    name = "pipeline"
    section = "5.1.5"
    check_vma = False  # the step psums the shared weights' gradients itself (with the check on, JAX would too)

    microbatches: int = 4
    kind: Kind = "1f1b"
    axis: str = "stage"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be 'gpipe' or '1f1b', got {self.kind!r}")
        object.__setattr__(self, "microbatches", positive_int("microbatches", self.microbatches))

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return (self.axis,)

    def check_batch(self, batch: int, seq_len: int, mesh_shape: MeshShape) -> None:
        if batch % self.microbatches:
            raise ValueError(f"batch {batch} is not a multiple of n_microbatches={self.microbatches}")


    def check_model(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> None:
        n_stages = mesh_shape[self.axis]
        if cfg.n_layers % n_stages:
            raise ValueError(f"n_layers={cfg.n_layers} must split evenly over {n_stages} stages; "
                             "pick a stage count that divides it")

    def param_rules(self, mesh_shape: MeshShape) -> specs.Rules:
        return (("layers", self.axis),)

    def token_spec(self, mesh_shape: MeshShape) -> P:
        return P()  # every stage reads the tokens: the first for its inputs, the last for its targets

    def local_loss_and_grads(self, cfg: TransformerConfig, mesh_shape: MeshShape) -> LocalFn:
        axis, n_st, m = self.axis, mesh_shape[self.axis], self.microbatches
        table = schedule(self.kind, n_st, m)
        codes = [[0] * n_st for _ in range(table.n_ticks)]  # 0 idle, 1 F, 2 B
        mbs = [[0] * n_st for _ in range(table.n_ticks)]
        for o in table.table:
            codes[o.time][o.stage], mbs[o.time][o.stage] = 1 + (o.op == "B"), o.microbatch
        up = [(s, s + 1) for s in range(n_st - 1)]
        down = [(s + 1, s) for s in range(n_st - 1)]

        def stage_fwd(layers: Any, shared: Any, x_in: jax.Array, tok: jax.Array) -> jax.Array:
            """x_in [b, T, D] (the stage below's output), tok [b, T+1] -> [b, T, D]."""
            x = jnp.where(jax.lax.axis_index(axis) == 0, shared["embed"][tok[:, :-1]], x_in)  # [b, T, D]
            return model.run_layers(cfg, x, lambda j: jax.tree.map(lambda a: a[j], layers), range(cfg.n_layers // n_st))

        def local(params: Any, tokens: jax.Array) -> tuple[jax.Array, Any]:  # tokens [B, T+1] replicated
            self.check_batch(tokens.shape[0], tokens.shape[1] - 1, mesh_shape)
            tokens = tokens.reshape(m, tokens.shape[0] // m, tokens.shape[1])  # [M, b, T+1]
            code_t, mb_t = jnp.array(codes, jnp.int32), jnp.array(mbs, jnp.int32)  # [ticks, S] each
            layers = params["layers"]
            shared = {k: v for k, v in params.items() if k != "layers"}
            me = jax.lax.axis_index(axis)
            last = me == n_st - 1
            act = jnp.zeros(tokens.shape[1:2] + (tokens.shape[2] - 1, cfg.d_model), jnp.float32)  # [b, T, D]
            zero_grads = jax.tree.map(jnp.zeros_like, (layers, shared))
            no_loss = jnp.zeros((), jnp.float32)

            def fwd_op(x_st: jax.Array, dy_st: jax.Array, i: jax.Array) -> tuple:  # run the stage, pass the output up
                return stage_fwd(layers, shared, x_st[i], tokens[i]), act, zero_grads, no_loss

            def bwd_op(x_st: jax.Array, dy_st: jax.Array, i: jax.Array) -> tuple:
                """Recompute the stage from its stored input, take the vjp, pass d input down."""
                def g(lw: Any, sw: Any, x_in: jax.Array) -> jax.Array:
                    y = stage_fwd(lw, sw, x_in, tokens[i])  # [b, T, D]
                    head = model.token_nll(cfg, sw, y, tokens[i][:, 1:]).mean() / m
                    return jnp.where(last, head, jnp.vdot(y, dy_st[i]))
                val, (gl, gs, gx) = jax.value_and_grad(g, argnums=(0, 1, 2))(layers, shared, x_st[i])
                return act, gx, (gl, gs), jnp.where(last, val, 0.0)

            def idle_op(x_st: jax.Array, dy_st: jax.Array, i: jax.Array) -> tuple:
                return act, act, zero_grads, no_loss

            def tick(carry: tuple, xs: tuple[jax.Array, jax.Array]) -> tuple[tuple, None]:
                x_st, dy_st, grads, loss = carry  # stashes [M, b, T, D]
                code, mb = xs  # [S] each: what every stage does this tick
                y, dx, g, l_ = jax.lax.switch(code[me], (idle_op, fwd_op, bwd_op), x_st, dy_st, mb[me])
                x_in = jax.lax.ppermute(y, axis, up)  # [b, T, D] activations one stage up
                dy_in = jax.lax.ppermute(dx, axis, down)  # [b, T, D] their gradients one stage down
                src_up, src_dn = jnp.maximum(me - 1, 0), jnp.minimum(me + 1, n_st - 1)
                got_x = (me > 0) & (code[src_up] == 1)
                got_dy = (me < n_st - 1) & (code[src_dn] == 2)
                x_st = jnp.where(got_x, x_st.at[mb[src_up]].set(x_in), x_st)  # [M, b, T, D]
                dy_st = jnp.where(got_dy, dy_st.at[mb[src_dn]].set(dy_in), dy_st)  # [M, b, T, D]
                return (x_st, dy_st, jax.tree.map(jnp.add, grads, g), loss + l_), None

            stash = jnp.zeros((m,) + act.shape, act.dtype)  # [M, b, T, D]
            (_, _, (gl, gs), loss), _ = jax.lax.scan(tick, (stash, stash, zero_grads, no_loss), (code_t, mb_t))
            loss, gs = jax.lax.psum((loss, gs), axis)  # all-reduce: the shared weights served stages 0 and S-1
            return loss, {**gs, "layers": gl}

        return local

    def predicted_collectives(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int,
                              seq_len: int) -> tuple[Collective, ...]:
        """Per step: one activation and one gradient permute per tick, one all-reduce of the shared
        (unsplit) weights' gradients and the loss."""
        self.check(cfg, mesh_shape, batch, seq_len)
        ticks = schedule(self.kind, mesh_shape[self.axis], self.microbatches).n_ticks
        act_bytes = batch // self.microbatches * seq_len * cfg.d_model * 4
        shapes = model.param_shapes(cfg)
        leaves = zip(jax.tree.leaves(shapes), jax.tree.leaves(self.param_specs(shapes, mesh_shape), is_leaf=is_spec))
        shared = sum(nbytes(s) for s, p in leaves if not specs.mesh_axes_of(p))
        return (Collective("collective_permute", (self.axis,), act_bytes, ticks, phase="forward"),
                Collective("collective_permute", (self.axis,), act_bytes, ticks, phase="backward"),
                Collective("all_reduce", (self.axis,), shared + 4, 1, phase="backward"))

    def step_flops(self, cfg: TransformerConfig, mesh_shape: MeshShape, batch: int, seq_len: int) -> PipelineFlops:
        """Per stage: M F ops (its L / S layers on one microbatch) and M B ops (recompute 1x + backward 2x
        of the stage, and of the head, which ``jnp.where(last, ...)`` evaluates on every stage)."""
        self.check(cfg, mesh_shape, batch, seq_len)
        n_stages, m = mesh_shape[self.axis], self.microbatches
        stage = cfg.replace(n_layers=cfg.n_layers // n_stages)  # [L/S, ...] layers on each stage
        tokens = batch // m * seq_len  # one microbatch, b T tokens
        forward = fl.forward_flops(stage, tokens, seq_len, include_unembed=False, moe_compute="dense")
        backward = fl.forward_flops(stage, tokens, seq_len, moe_compute="dense").scaled(3.0)
        shapes = model.param_shapes(cfg)
        held = specs.local_elements(shapes, self.param_specs(shapes, mesh_shape), mesh_shape)
        return PipelineFlops((forward + backward).scaled(m), adam_flops(held), forward, backward, m,
                             schedule(self.kind, n_stages, m).n_ticks)

    @classmethod
    def check_layer(cls, layout: Layout, layer: LayerModel) -> None:
        if layout.stages > layer.n_layers:
            raise ValueError(f"{layout.stages} pipeline stages for {layer.n_layers} layers; use at most one stage "
                             "per layer (LayerModel.from_config sets n_layers)")

    @classmethod
    def layer_comms_s(cls, t: LayerTerms) -> tuple[float, float]:
        """Each stage sends its tokens' activations one hop per pass (amortized over all L layers), and
        the backward AllReduces the stage's weights over the data axes."""
        lay = t.layout
        hop = comms_time_s(t.activation_bytes, t.chip.ici_one_way_bytes_per_s) if lay.stages > 1 else 0.0
        forward = hop / t.layer.n_layers
        return forward, forward + t.time_s("all_reduce", t.weight_bytes / lay.stages, lay.data_axes)

    @classmethod
    def bubble_fraction(cls, layout: Layout) -> float:
        return thresholds.pipeline_bubble_fraction(layout.stages, layout.microbatches)

    @classmethod
    def candidate_layouts(cls, ctx: PlanContext) -> tuple[Layout, ...]:
        """Z stages (as asked, else the most of 1, 2, 4, 8, 16 that divide L and fit), 4 Z microbatches."""
        z = ctx.pipeline_stages or max(d for d in (1, 2, 4, 8, 16) if ctx.layer.n_layers % d == 0 and d <= ctx.chips)
        return (Layout(cls.name, data_axes=ctx.split(ctx.chips // z), stages=z,
                       microbatches=ctx.microbatches or 4 * z),)

    @classmethod
    def plan_notes(cls, layout: Layout, ctx: PlanContext) -> tuple[str, ...]:
        micro = ctx.global_batch_tokens / (layout.batch_ways * layout.microbatches)
        if micro < thresholds.hbm_critical_batch_tokens(ctx.chip):
            return (f"microbatches of {micro:.0f} tokens per chip are HBM-bandwidth-bound",)
        return ()
