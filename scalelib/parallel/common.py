"""Small pieces every parallel scheme uses: mesh axes, batch checks, placement, gradient accumulation.

Book section 5 splits a batch over mesh axes ("B_X") and accumulates gradients over microbatches;
these helpers do that bookkeeping once for all schemes in ``scalelib.parallel``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from scalelib import compat, placement

Axes = str | tuple[str, ...]
MeshShape = Mapping[str, int]


def as_axes(axes: Axes) -> tuple[str, ...]:
    """One mesh axis name or several, always as a tuple."""
    return (axes,) if isinstance(axes, str) else tuple(axes)


def axes_size(mesh_shape: MeshShape, axes: Axes) -> int:
    """Devices along ``axes`` of the mesh (the product of their sizes)."""
    missing = [a for a in as_axes(axes) if a not in mesh_shape]
    if missing:
        raise ValueError(f"mesh axes {missing} are not in the mesh {dict(mesh_shape)}; name axes that exist "
                         "or build the mesh with compat.make_mesh(shape, names)")
    return math.prod(mesh_shape[a] for a in as_axes(axes))


def check_batch(batch: int, n: int, axes: Axes, microbatches: int = 1) -> None:
    """Raise unless ``batch`` splits evenly into ``n`` devices x ``microbatches``."""
    if batch % (n * microbatches):
        raise ValueError(f"batch={batch} is not divisible by the {n} devices of data axes {as_axes(axes)}"
                         f" x microbatches={microbatches}; pick a batch that is a multiple of {n * microbatches}")


def check_mesh_axes(mesh_shape: MeshShape, want: Sequence[str], what: str) -> None:
    """Raise unless the mesh has exactly the axes ``want``, in that order."""
    if tuple(mesh_shape) != tuple(want):
        raise ValueError(f"{what} needs a mesh with axes {tuple(want)} in that order, got {dict(mesh_shape)}; "
                         f"build it with compat.make_mesh(shape, {tuple(want)})")


def n_elements(tree: Any) -> int:
    """Scalars in a pytree of arrays or ShapeDtypeStructs."""
    return sum(math.prod(x.shape) for x in jax.tree.leaves(tree))


def nbytes(x: Any) -> int:
    """Bytes of one array or ShapeDtypeStruct."""
    return math.prod(x.shape) * jnp.dtype(x.dtype).itemsize


def is_spec(x: Any) -> bool:
    return isinstance(x, P)


def place(tree: Any, mesh: jax.sharding.Mesh, specs: Any) -> Any:
    """device_put every leaf of ``tree`` with the NamedSharding of its PartitionSpec in ``specs``.

    Under jit this reshards instead, and it is a no-op for arrays already placed so.
    """
    return jax.tree.map(lambda x, s: placement.put(x, NamedSharding(mesh, s)), tree, specs, is_leaf=is_spec)


def replicated(tree: Any) -> Any:
    """P() for every leaf: the tree lives whole on every device."""
    return jax.tree.map(lambda _: P(), tree)


def local_grads(loss_fn: Callable, params: Any, tokens: jax.Array, microbatches: int,
                axes: tuple[str, ...]) -> tuple[jax.Array, Any]:
    """Mean of (loss, grads) over ``microbatches`` slices of the local tokens (no communication).

    ``loss_fn(params, tokens) -> scalar``. Gradient accumulation: a ``lax.scan`` over
    tokens [M, B_local/M, T+1]; only the running sums of the gradients stay alive.
    """
    b_local = tokens.shape[0]
    mbs = tokens.reshape(microbatches, b_local // microbatches, tokens.shape[1])  # [M, B/(X M), T+1]

    def body(carry: tuple, mb: jax.Array) -> tuple[tuple, None]:  # mb [B/(X M), T+1] per device
        loss_sum, g_sum = carry
        loss, g = jax.value_and_grad(loss_fn)(params, mb)
        return (loss_sum + loss, jax.tree.map(jnp.add, g_sum, g)), None

    zero = compat.pvary(jnp.zeros((), jnp.float32), axes)  # [] per device
    init = (zero, jax.tree.map(jnp.zeros_like, params))
    (loss_sum, g_sum), _ = lax.scan(body, init, mbs)
    return loss_sum / microbatches, jax.tree.map(lambda g: g / microbatches, g_sum)
