"""Pipeline parallelism over a "stage" mesh axis: GPipe and 1F1B schedules, executed for real.

Book section 5.1.5 (Pipelining). The L stacked layers are split into S equal stages (the params'
leading L axis is sharded over ``stage``); the batch is cut into M microbatches that travel
stage to stage. Forward: each tick, activations [b, T, D] move one hop up with a ``ppermute``
(collective-permute). Backward: the gradients w.r.t. those activations move one hop down with a
second ``ppermute``. At the end the gradients of the replicated weights (embedding, final norm,
unembedding) and the loss are summed over stages with one ``psum`` (all-reduce).

``schedule`` is the pure timetable (which stage runs F or B of which microbatch at each tick,
every op one tick long); ``make_step`` executes any such timetable under ``shard_map``: an F
op stores its input and sends its output on, a B op recomputes the stage from that stored input
and takes its ``jax.vjp`` (full rematerialisation of the stage; the stored inputs live in an
[M, b, T, D] buffer, of which ``Schedule.peak_in_flight`` slots are ever live: M for GPipe, at most
S for 1F1B). Idle ticks are the bubble: (S - 1) / (M + S - 1) of each stage's time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, model, train
from scalelib.kernels.flash_attention import reference_attention
from scalelib.parallel.data import Collective, MemoryPrediction, memory_from_counts, param_shapes
from scalelib.transformer import TransformerConfig

Kind = Literal["gpipe", "1f1b"]
AXIS = "stage"


class Op(NamedTuple):
    time: int  # tick
    stage: int
    op: str  # "F" or "B"
    microbatch: int


@dataclass(frozen=True)
class Schedule:
    kind: str
    n_stages: int
    n_microbatches: int
    table: tuple[Op, ...]  # sorted by (time, stage)

    @property
    def n_ticks(self) -> int:
        return 1 + max(o.time for o in self.table)

    @property
    def bubble_fraction(self) -> float:
        """Idle fraction of the stage-ticks (each stage is busy for 2 M of them)."""
        return 1 - len(self.table) / (self.n_stages * self.n_ticks)

    def peak_in_flight(self) -> tuple[int, ...]:
        """Per stage: most microbatches whose F has run but whose B has not (stored activations)."""
        peaks = []
        for s in range(self.n_stages):
            live = peak = 0
            for o in (o for o in self.table if o.stage == s):
                live += 1 if o.op == "F" else -1
                peak = max(peak, live)
            peaks.append(peak)
        return tuple(peaks)


def _stage_order(kind: str, s: int, n_stages: int, m: int) -> list[tuple[str, int]]:
    if kind == "gpipe":  # all forwards, then backwards newest first (what autodiff of a loop does)
        return [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    warm = min(n_stages - s - 1, m)  # 1F1B: fill the pipe, then alternate, then drain
    order = [("F", i) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i), ("B", i)]
    return order + [("B", i) for i in range(m - warm, m)]


def schedule(kind: Kind, n_stages: int, n_microbatches: int) -> Schedule:
    """Timetable of ``kind`` ("gpipe" or "1f1b"): each stage runs its op order as early as the
    dependencies allow (F(s, i) after F(s-1, i); B(s, i) after F(s, i) and B(s+1, i))."""
    if kind not in ("gpipe", "1f1b"):
        raise ValueError(f"kind must be 'gpipe' or '1f1b', got {kind!r}")
    if n_stages < 1 or n_microbatches < 1:
        raise ValueError(f"need n_stages >= 1 and n_microbatches >= 1, got {n_stages}, {n_microbatches}")
    s_, m = n_stages, n_microbatches
    orders = [_stage_order(kind, s, s_, m) for s in range(s_)]
    done: dict[tuple[str, int, int], int] = {}  # (op, stage, mb) -> tick
    table: list[Op] = []
    t = 0
    while any(orders):
        now = []
        for s in range(s_):
            if not orders[s]:
                continue
            op, i = orders[s][0]
            if op == "F":
                ready = s == 0 or ("F", s - 1, i) in done
            else:
                ready = ("F", s, i) in done and (s == s_ - 1 or ("B", s + 1, i) in done)
            if ready:
                orders[s].pop(0)
                now.append(Op(t, s, op, i))
        done.update({(o.op, o.stage, o.microbatch): t for o in now})  # visible from the next tick on
        table += now
        t += 1
    return Schedule(kind, s_, m, tuple(table))


def draw_schedule(sched: Schedule, ax=None):
    """Gantt chart: one row per stage, F blue / B green boxes labelled by microbatch -> (fig, ax)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * sched.n_ticks), 0.5 * sched.n_stages + 1.2)) if ax is None \
        else (ax.figure, ax)
    for o in sched.table:
        ax.broken_barh([(o.time, 1)], (o.stage - 0.4, 0.8), color="tab:blue" if o.op == "F" else "tab:green",
                       edgecolor="white")
        ax.text(o.time + 0.5, o.stage, f"{o.op}{o.microbatch}", ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(range(sched.n_stages), [f"stage {s}" for s in range(sched.n_stages)])
    ax.set_ylim(sched.n_stages - 0.5, -0.5)
    ax.set_xlim(0, sched.n_ticks)
    ax.set_xlabel("tick")
    ax.set_title(f"{sched.kind}: S={sched.n_stages}, M={sched.n_microbatches}, "
                 f"bubble {sched.bubble_fraction:.0%}")
    return fig, ax


# ------------------------------------------------------------------------------ execution

def _check(cfg: TransformerConfig, n_stages: int, batch: int, n_microbatches: int) -> None:
    if cfg.n_layers % n_stages:
        raise ValueError(f"n_layers={cfg.n_layers} must split evenly over {n_stages} stages; "
                         "pick a stage count that divides it")
    if batch % n_microbatches:
        raise ValueError(f"batch {batch} is not a multiple of n_microbatches={n_microbatches}")


def param_specs(params: model.Params) -> dict:
    """PartitionSpecs: per-layer arrays split on their L axis over stages, the rest replicated."""
    return {k: jax.tree.map(lambda _: P(AXIS) if k == "layers" else P(), v) for k, v in params.items()}


def shard_state(state: train.TrainState, mesh) -> train.TrainState:
    """Place a ``train.TrainState`` (params and Adam moments alike) as ``param_specs`` says."""
    specs = param_specs(state.params)
    opt = train.AdamState(_put(state.opt.count, P(), mesh), _put(state.opt.mu, specs, mesh),
                          _put(state.opt.nu, specs, mesh))
    return train.TrainState(_put(state.params, specs, mesh), opt)


def _put(tree, specs, mesh):
    """Place (or, under jit, reshard) arrays as shard_map's in_specs expect; a no-op when already there."""
    return jax.tree.map(lambda a, s: jax.device_put(a, NamedSharding(mesh, s)), tree, specs)


def make_loss_and_grads(cfg: TransformerConfig, mesh, n_microbatches: int, kind: Kind = "1f1b"):
    """``f(params, tokens [B, T+1]) -> (loss, grads)`` running ``schedule(kind, S, M)`` for real.

    ``params`` placed as ``shard_state`` does; equals ``train.loss_and_grads(params, tokens, cfg)``.
    """
    n_st = mesh.shape[AXIS]
    table = schedule(kind, n_st, n_microbatches)
    codes = [[0] * n_st for _ in range(table.n_ticks)]  # 0 idle, 1 F, 2 B
    mbs = [[0] * n_st for _ in range(table.n_ticks)]
    for o in table.table:
        codes[o.time][o.stage], mbs[o.time][o.stage] = 1 + (o.op == "B"), o.microbatch
    codes, mbs = jnp.array(codes, jnp.int32), jnp.array(mbs, jnp.int32)  # [ticks, S] each
    up = [(s, s + 1) for s in range(n_st - 1)]
    down = [(s + 1, s) for s in range(n_st - 1)]
    m = n_microbatches

    def stage_fwd(layers, shared, x_in, tok):  # x_in [b, T, D], tok [b, T+1] -> [b, T, D]
        first = jax.lax.axis_index(AXIS) == 0
        x = jnp.where(first, shared["embed"][tok[:, :-1]], x_in)  # [b, T, D]
        for j in range(cfg.n_layers // n_st):
            p = jax.tree.map(lambda a: a[j], layers)
            x = x + model.attention_block(cfg, p, x, reference_attention)  # [b, T, D]
            x = x + model.mlp_block(cfg, p, x)  # [b, T, D]
        return x

    def head_loss(shared, x, tok):  # x [b, T, D] -> mean next-token loss of this microbatch
        if cfg.final_norm:
            x = model.norm(x, shared["final_norm"], shared.get("final_norm_bias"), cfg.norm_eps)  # [b, T, D]
        w_out = shared["embed"].T if cfg.tied_embeddings else shared["unembed"]  # [D, V]
        logp = jax.nn.log_softmax((x @ w_out).astype(jnp.float32), axis=-1)  # [b, T, V]
        return -jnp.take_along_axis(logp, tok[:, 1:, None], axis=-1).mean()

    def body(params, tokens):  # tokens [M, b, T+1] replicated
        layers = params["layers"]
        shared = {k: v for k, v in params.items() if k != "layers"}
        me = jax.lax.axis_index(AXIS)
        last = me == n_st - 1
        act = jnp.zeros(tokens.shape[1:2] + (tokens.shape[2] - 1, cfg.d_model), jnp.float32)  # [b, T, D]
        zero_grads = jax.tree.map(jnp.zeros_like, (layers, shared))
        no_loss = jnp.zeros((), jnp.float32)

        def fwd_op(x_st, dy_st, i):  # run the stage, pass the output up
            return stage_fwd(layers, shared, x_st[i], tokens[i]), act, zero_grads, no_loss

        def bwd_op(x_st, dy_st, i):  # recompute from the stored input, vjp, pass d input down
            def g(lw, sw, x_in):
                y = stage_fwd(lw, sw, x_in, tokens[i])  # [b, T, D]
                return jnp.where(last, head_loss(sw, y, tokens[i]) / m, jnp.vdot(y, dy_st[i]))
            val, (gl, gs, gx) = jax.value_and_grad(g, argnums=(0, 1, 2))(layers, shared, x_st[i])
            return act, gx, (gl, gs), jnp.where(last, val, 0.0)

        def idle_op(x_st, dy_st, i):
            return act, act, zero_grads, no_loss

        def tick(carry, xs):
            x_st, dy_st, grads, loss = carry  # stashes [M, b, T, D]
            code, mb = xs  # [S] each: what every stage does this tick
            y, dx, g, l_ = jax.lax.switch(code[me], (idle_op, fwd_op, bwd_op), x_st, dy_st, mb[me])
            x_in = jax.lax.ppermute(y, AXIS, up)  # [b, T, D] activations one stage up
            dy_in = jax.lax.ppermute(dx, AXIS, down)  # [b, T, D] their gradients one stage down
            src_up, src_dn = jnp.maximum(me - 1, 0), jnp.minimum(me + 1, n_st - 1)
            got_x = (me > 0) & (code[src_up] == 1)
            got_dy = (me < n_st - 1) & (code[src_dn] == 2)
            x_st = jnp.where(got_x, x_st.at[mb[src_up]].set(x_in), x_st)  # [M, b, T, D]
            dy_st = jnp.where(got_dy, dy_st.at[mb[src_dn]].set(dy_in), dy_st)  # [M, b, T, D]
            return (x_st, dy_st, jax.tree.map(jnp.add, grads, g), loss + l_), None

        stash = jnp.zeros((m,) + act.shape, act.dtype)  # [M, b, T, D]
        (_, _, (gl, gs), loss), _ = jax.lax.scan(tick, (stash, stash, zero_grads, no_loss), (codes, mbs))
        loss, gs = jax.lax.psum((loss, gs), AXIS)  # all-reduce: the shared weights served stages 0 and S-1
        return loss, {**gs, "layers": gl}

    def loss_and_grads(params, tokens):
        _check(cfg, n_st, tokens.shape[0], m)
        specs = param_specs(params)
        # check_vma=False: we psum the shared weights' grads ourselves; with the check on, JAX sums
        # them already (transpose of its implicit pvary) and our psum doubles them (seen in testing).
        f = compat.shard_map(body, mesh=mesh, in_specs=(specs, P()), out_specs=(P(), specs), check_vma=False)
        tokens = tokens.reshape(m, tokens.shape[0] // m, tokens.shape[1])  # [M, b, T+1]
        return f(_put(params, specs, mesh), jax.device_put(tokens, NamedSharding(mesh, P())))

    return loss_and_grads


def make_step(cfg: TransformerConfig, mesh, n_microbatches: int, kind: Kind = "1f1b", hp: train.Adam = train.Adam()):
    """``step(state, tokens) -> (state, loss)``: the pipelined gradients, then Adam on each shard."""
    loss_and_grads = make_loss_and_grads(cfg, mesh, n_microbatches, kind)

    def step(state: train.TrainState, tokens: jax.Array):
        loss, grads = loss_and_grads(state.params, tokens)
        params, opt = train.adam_update(hp, grads, state.opt, state.params)  # elementwise: no communication
        return train.TrainState(params, opt), loss

    return step


def predicted_collectives(cfg: TransformerConfig, n_stages: int, batch: int, seq_len: int, n_microbatches: int,
                          kind: Kind = "1f1b", bytes_per_elem: int = 4) -> tuple[Collective, ...]:
    """Per step: one activation and one gradient permute per tick, one all-reduce of the shared grads."""
    ticks = schedule(kind, n_stages, n_microbatches).n_ticks
    act_bytes = batch // n_microbatches * seq_len * cfg.d_model * bytes_per_elem
    shared = cfg.vocab_size * cfg.d_model * (1 if cfg.tied_embeddings else 2)
    shared += cfg.d_model * (1 + cfg.norm_bias) if cfg.final_norm else 0
    return (Collective("collective_permute", (AXIS,), act_bytes, ticks, phase="forward"),
            Collective("collective_permute", (AXIS,), act_bytes, ticks, phase="backward"),
            Collective("all_reduce", (AXIS,), (shared + 1) * bytes_per_elem, 1, phase="backward"))


def predicted_memory_bytes(cfg: TransformerConfig, n_stages: int, batch: int, seq_len: int,
                           dtype_bytes: int = 4) -> MemoryPrediction:
    """Per-device bytes as ``shard_state`` and ``make_step`` lay them out.

    The stacked per-layer arrays [L, ...] hold L / S layers on each stage; the embedding, final
    norm and unembedding are replicated on every stage, and so are the tokens [B, T+1] (every
    stage reads them: the first for its inputs, the last for its targets). Adam's moments follow
    the params; the int32 step counter is replicated.
    """
    _check(cfg, n_stages, batch, 1)
    shapes = param_shapes(cfg)
    per_device = sum(math.prod(x.shape) // (n_stages if k == "layers" else 1)
                     for k, v in shapes.items() for x in jax.tree.leaves(v))
    return memory_from_counts(per_device, batch, seq_len, dtype_bytes=dtype_bytes)
