"""Pure data parallelism: the batch is split over devices, every device holds all the weights.

Book section 5.1.1 (Data Parallelism): In[B_X, D] . W_in[D, F] . W_out[F, D] -> Out[B_X, D].

* forward: no communication at all; each device runs the whole model on its B/X sequences.
* backward: one AllReduce (``lax.pmean``) of every weight gradient over the data axis, off the
  critical path (any time before the optimizer needs it). The loss is also averaged (a
  4-byte AllReduce) so every device reports the global mean.

Gradient accumulation (``microbatches > 1``) runs the local batch as M slices in a ``lax.scan``
and sums their gradients before the one AllReduce: communication stays the same per step while
activation memory drops to one microbatch. ``remat`` is passed to ``scalelib.model.loss``.

This module also holds the small pieces the other schemes share: ``Collective`` (one predicted
collective), ``MemoryPrediction``, the parameter shapes of a config and input placement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P

from scalelib import compat, model, train
from scalelib.transformer import TransformerConfig
from scalelib.transformer_memory import training_state_memory

Axes = str | tuple[str, ...]


@dataclass(frozen=True)
class Collective:
    """One kind of collective a step should contain: ``count`` ops, each ``bytes_per_device`` big.

    Bytes are those of the op's result on one device (what ``scalelib.hlo.collective_ops`` reads).
    """

    kind: str  # "all_reduce", "all_gather", "reduce_scatter"
    axes: tuple[str, ...]
    bytes_per_device: int
    count: int = 1
    phase: str = "backward"  # "forward", "backward" or "optimizer": where the book places it

    @property
    def total_bytes(self) -> int:
        return self.bytes_per_device * self.count


@dataclass(frozen=True)
class MemoryPrediction:
    """Bytes one device holds for a step: state (params, Adam), gradients and its token batch."""

    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int  # mu, nu and the 4-byte step counter
    batch_bytes: int  # the device's tokens [B/X, T+1] int32

    @property
    def argument_bytes(self) -> int:
        """What ``compiled.memory_analysis().argument_size_in_bytes`` should say: state + tokens."""
        return self.params_bytes + self.optimizer_bytes + self.batch_bytes


def as_axes(axes: Axes) -> tuple[str, ...]:
    return (axes,) if isinstance(axes, str) else tuple(axes)


def axes_size(mesh_shape: Mapping[str, int], axes: Axes) -> int:
    missing = [a for a in as_axes(axes) if a not in mesh_shape]
    if missing:
        raise ValueError(f"mesh axes {missing} are not in the mesh {dict(mesh_shape)}; name axes that exist "
                         "or build the mesh with compat.make_mesh(shape, names)")
    return math.prod(mesh_shape[a] for a in as_axes(axes))


def check_batch(batch: int, n: int, axes: Axes, microbatches: int = 1) -> None:
    if batch % (n * microbatches):
        raise ValueError(f"batch={batch} is not divisible by the {n} devices of data axes {as_axes(axes)}"
                         f" x microbatches={microbatches}; pick a batch that is a multiple of {n * microbatches}")


def param_shapes(cfg: TransformerConfig, dtype=jnp.float32) -> dict:
    """ShapeDtypeStructs of ``model.init(key, cfg)`` without computing anything."""
    return jax.eval_shape(lambda k: model.init(k, cfg, dtype), jax.random.key(0))


def nbytes(x) -> int:
    return math.prod(x.shape) * jnp.dtype(x.dtype).itemsize


def place(tree, mesh: jax.sharding.Mesh, specs):
    """device_put every leaf of ``tree`` with the NamedSharding of its PartitionSpec in ``specs``."""
    return jax.tree.map(lambda x, s: jax.device_put(x, NamedSharding(mesh, s)), tree, specs,
                        is_leaf=lambda s: isinstance(s, P))


def state_specs(state: train.TrainState, param_spec, opt_spec=None) -> train.TrainState:
    """PartitionSpecs of a TrainState: params and both Adam moments follow the given trees."""
    opt_spec = param_spec if opt_spec is None else opt_spec
    return train.TrainState(param_spec, train.AdamState(P(), opt_spec, opt_spec))


def replicated(tree):
    return jax.tree.map(lambda _: P(), tree)


def local_grads(loss_fn: Callable, params, tokens, microbatches: int, axes: tuple[str, ...]):
    """Sum of (loss, grads) over ``microbatches`` slices of the local tokens, divided by M (no comms).

    ``loss_fn(params, tokens) -> scalar``. Gradient accumulation: a ``lax.scan`` over
    tokens [M, B_local/M, T+1]; only the running sums of the gradients stay alive.
    """
    b_local = tokens.shape[0]
    mbs = tokens.reshape(microbatches, b_local // microbatches, tokens.shape[1])  # [M, B/(X M), T+1]

    def body(carry, mb):  # mb [B/(X M), T+1] per device
        loss_sum, g_sum = carry
        loss, g = jax.value_and_grad(loss_fn)(params, mb)
        return (loss_sum + loss, jax.tree.map(jnp.add, g_sum, g)), None

    zero = compat.pvary(jnp.zeros((), jnp.float32), axes)  # [] per device
    init = (zero, jax.tree.map(jnp.zeros_like, params))
    (loss_sum, g_sum), _ = lax.scan(body, init, mbs)
    return loss_sum / microbatches, jax.tree.map(lambda g: g / microbatches, g_sum)


def make_step(cfg: TransformerConfig, mesh: jax.sharding.Mesh, hp: train.Adam = train.Adam(), *,
              axes: Axes = "data", microbatches: int = 1, remat: str = "none", scan_layers: bool = False,
              return_grads: bool = False):
    """Jitted ``step(state, tokens) -> (state, loss)`` (or ``(state, loss, grads)``).

    ``state`` replicated (P()), ``tokens`` [B, T+1] sharded over ``axes`` (one axis or several:
    the book's data parallelism over more than one mesh axis). Place inputs with ``shard_inputs``.
    """
    axes = as_axes(axes)
    n = axes_size(mesh.shape, axes)

    def local(state: train.TrainState, tokens: jax.Array):  # tokens [B/X, T+1] per device
        check_batch(tokens.shape[0] * n, n, axes, microbatches)
        # pvary makes the weights "varying": their gradient is this device's alone (no implicit
        # sum), so the AllReduce below is the only one in the program.
        params = compat.pvary(state.params, axes)
        loss_fn = lambda p, t: model.loss(p, t, cfg, remat=remat, scan_layers=scan_layers)  # noqa: E731
        loss, grads = local_grads(loss_fn, params, tokens, microbatches, axes)
        grads = jax.tree.map(lambda g: lax.pmean(g, axes), grads)  # AllReduce over X: the backward's only collective
        loss = lax.pmean(loss, axes)  # [] global mean loss
        new_params, opt = train.adam_update(hp, grads, state.opt, state.params)  # identical on every device
        out = (train.TrainState(new_params, opt), loss)
        return out + (grads,) if return_grads else out

    state_spec = state_specs(_state_shapes(cfg), replicated(param_shapes(cfg)))
    out_specs = (state_spec, P()) + ((replicated(param_shapes(cfg)),) if return_grads else ())
    fn = compat.shard_map(local, mesh=mesh, in_specs=(state_spec, P(axes)), out_specs=out_specs)
    return jax.jit(fn)


def _state_shapes(cfg: TransformerConfig) -> train.TrainState:
    return jax.eval_shape(lambda k: train.init_state(k, cfg), jax.random.key(0))


def shard_inputs(state: train.TrainState, tokens: jax.Array, mesh: jax.sharding.Mesh, axes: Axes = "data"):
    """Replicate the state and split tokens [B, T+1] over ``axes`` (placement before shard_map)."""
    check_batch(tokens.shape[0], axes_size(mesh.shape, axes), axes)
    return place(state, mesh, state_specs(state, replicated(state.params))), \
        jax.device_put(tokens, NamedSharding(mesh, P(as_axes(axes))))


def predicted_collectives(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                          axes: Axes = "data", microbatches: int = 1) -> tuple[Collective, ...]:
    """One AllReduce per weight array (its full size: weights are replicated) and one for the loss.

    Independent of batch and microbatches: accumulation communicates once per step.
    """
    n = axes_size(mesh_shape, axes)
    check_batch(batch, n, axes, microbatches)
    leaves = jax.tree.leaves(param_shapes(cfg))
    out = [Collective("all_reduce", as_axes(axes), nbytes(x)) for x in leaves]
    return tuple(out) + (Collective("all_reduce", as_axes(axes), 4, phase="loss"),)


def predicted_memory_bytes(cfg: TransformerConfig, mesh_shape: Mapping[str, int], batch: int, seq_len: int, *,
                           axes: Axes = "data", dtype_bytes: int = 4) -> MemoryPrediction:
    """Everything replicated: full params, full gradients and full Adam moments on every device."""
    n = axes_size(mesh_shape, axes)
    check_batch(batch, n, axes)
    n_params = sum(math.prod(x.shape) for x in jax.tree.leaves(param_shapes(cfg)))
    mem = training_state_memory(n_params, param_bytes=dtype_bytes, adam_moment_bytes=dtype_bytes)
    return MemoryPrediction(int(mem.params_bytes), int(mem.grads_bytes), int(mem.optimizer_bytes) + 4,
                            batch // n * (seq_len + 1) * 4)


def memory_from_counts(params_per_device: int, token_rows_per_device: int, seq_len: int, *,
                       dtype_bytes: int = 4) -> MemoryPrediction:
    """A ``MemoryPrediction`` from the parameter elements one device holds and its rows of tokens.

    Gradients and both Adam moments are sharded exactly like the parameters; the step counter is
    one int32 on every device; each token row is [T+1] int32.
    """
    mem = training_state_memory(params_per_device, param_bytes=dtype_bytes, adam_moment_bytes=dtype_bytes)
    return MemoryPrediction(int(mem.params_bytes), int(mem.grads_bytes), int(mem.optimizer_bytes) + 4,
                            token_rows_per_device * (seq_len + 1) * 4)


def sum_by_kind(collectives: Sequence) -> dict[tuple[str, tuple[str, ...] | None], int]:
    """Total bytes per (kind, axes): works for predictions and for ``hlo.collective_ops`` alike."""
    out: dict = {}
    for c in collectives:
        total = c.total_bytes if isinstance(c, Collective) else c.result_bytes
        out[(c.kind, c.axes)] = out.get((c.kind, c.axes), 0) + total
    return out
