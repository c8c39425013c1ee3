"""Running a sharded-matmul plan under ``shard_map`` with an explicit ``jax.lax`` collective per step.

Book section 3.2. ``run_plan`` places A and B with the plan's input shardings, multiplies the local
blocks on every device and applies the plan's steps to them; the result is C sharded as the plan's
output. Every AllGather is typed invariant (``compat.all_gather_invariant``), so JAX checks that a
replicated output really is the same on every device.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from scalelib import compat, placement
from scalelib.sharded_matmul.plan import MatmulPlan, Step


def _apply(step: Step, x: jax.Array, dims: tuple[str, ...]) -> jax.Array:
    """One step on a local block ``x`` (inside shard_map) with explicit jax.lax collectives."""
    axes = step.axes if len(step.axes) > 1 else step.axes[0]
    if step.kind == "all_gather":  # [.., D/n, ..] -> [.., D, ..]
        return compat.all_gather_invariant(x, axes, axis=dims.index(step.dim), tiled=True)
    if step.kind == "reduce_scatter":  # partial [.., D, ..] -> summed [.., D/n, ..]
        return jax.lax.psum_scatter(x, axes, scatter_dimension=dims.index(step.dim), tiled=True)
    if step.kind == "all_reduce":  # partial -> summed, same shape
        return jax.lax.psum(x, axes)
    if step.kind == "all_to_all":  # [src/n, dst] -> [src, dst/n]
        return jax.lax.all_to_all(x, axes, split_axis=dims.index(step.dim),
                                  concat_axis=dims.index(step.src_dim), tiled=True)
    # slice: keep this device's block of a replicated dim, no communication
    axis = dims.index(step.dim)
    n = math.prod(jax.lax.axis_size(a) for a in step.axes)
    size = x.shape[axis] // n
    return jax.lax.dynamic_slice_in_dim(x, jax.lax.axis_index(axes) * size, size, axis=axis)


def run_plan(plan: MatmulPlan, a: Any, b: Any, mesh: jax.sharding.Mesh) -> jax.Array:
    """Execute ``plan`` on global arrays ``a`` [I, J] and ``b`` [J, K] over ``mesh``.

    Inputs are placed with the plan's input shardings, the body runs per device under
    ``compat.shard_map`` and every communication is an explicit ``jax.lax`` collective.
    Returns the global C [I, K] sharded as ``plan.out``.
    """
    if plan.out.unreduced:
        raise ValueError(f"run_plan returns finished arrays; {plan.out} is unreduced. Plan with a "
                         "reduced output, or stop before the reduction with plan.local_out")
    for s, x in ((plan.a, a), (plan.b, b)):
        s.local_shape(x.shape, mesh)  # clear error when a mesh size does not divide a dim
    put = lambda x, s: placement.put(x, jax.sharding.NamedSharding(mesh, s.spec))  # noqa: E731

    def body(x: jax.Array, y: jax.Array) -> jax.Array:  # x: A block [I/.., J/..], y: B block [J/.., K/..]
        for step in plan.pre:
            if step.before.name == "A":
                x = _apply(step, x, plan.a.dims)
            else:
                y = _apply(step, y, plan.b.dims)
        c = jnp.dot(x, y, preferred_element_type=jnp.float32)  # [I/.., K/..], partial over J's axes
        for step in plan.post:
            c = _apply(step, c, plan.out.dims)
        return c

    f = compat.shard_map(body, mesh=mesh, in_specs=(plan.a.spec, plan.b.spec), out_specs=plan.out.spec)
    return jax.jit(f)(put(a, plan.a), put(b, plan.b))
