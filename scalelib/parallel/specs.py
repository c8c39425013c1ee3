"""Sharding as data: rules that map the model's logical axes to mesh axes, turned into PartitionSpecs.

Book section 5 writes each scheme as letters with mesh subscripts: FSDP is W_in[D_X, F], tensor
parallelism W_in[D, F_Y], both at once W_in[D_X, F_Y]. A scheme here states the same thing as
``Rules``: an ordered tuple of (logical axis, mesh axes) pairs over the names of
``scalelib.param_axes``. For each parameter the rules are read in order; a rule applies when the
parameter has that logical axis, the dimension is still unsplit, none of the rule's mesh axes is
used by the parameter yet, and their size divides the dimension. So the order is a priority:
FSDP's ``(("vocab", X), ("d_ff", X), ("d_model", X))`` splits the embedding along V, the MLP
weights along F and every attention weight along D, one dimension per array.
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.sharding import PartitionSpec as P

from scalelib import param_axes as pa
from scalelib.parallel.common import MeshShape, as_axes, is_spec

Rule = tuple[str, str | tuple[str, ...]]
Rules = tuple[Rule, ...]
REPLICATED: Rules = ()


def spec_of(axes: pa.Axes, shape: tuple[int, ...], rules: Rules, mesh_shape: MeshShape) -> P:
    """The PartitionSpec of one array with logical ``axes`` and ``shape`` under ``rules``."""
    parts: list[Any] = [None] * len(axes)
    used: set[str] = set()
    for logical, mesh_axes in rules:
        names = as_axes(mesh_axes)
        if logical not in axes or used & set(names):
            continue
        d = axes.index(logical)
        if parts[d] is not None or shape[d] % math.prod(mesh_shape[a] for a in names):
            continue
        parts[d] = names[0] if len(names) == 1 else names
        used |= set(names)
    while parts and parts[-1] is None:
        parts.pop()
    return P(*parts)


def param_specs(params: dict, rules: Rules, mesh_shape: MeshShape) -> dict:
    """A tree like ``params`` (arrays or ShapeDtypeStructs) of PartitionSpecs under ``rules``."""
    missing = {a for _, m in rules for a in as_axes(m)} - set(mesh_shape)
    if missing:
        raise ValueError(f"the sharding rules name mesh axes {sorted(missing)} that the mesh {dict(mesh_shape)} "
                         "does not have; build the mesh with the scheme's mesh_axes")
    axes = pa.param_axes(params)  # a tuple of names at each array's position
    return jax.tree.map(lambda x, a: spec_of(a, x.shape, rules, mesh_shape), params, axes)


def mesh_axes_of(spec: P) -> tuple[str, ...]:
    """Every mesh axis a PartitionSpec splits over."""
    return tuple(a for part in spec if part is not None for a in as_axes(part))


def dim_of(spec: P, mesh_axis: str) -> int | None:
    """The dimension a PartitionSpec splits over ``mesh_axis``, or None."""
    for d, part in enumerate(spec):
        if part is not None and mesh_axis in as_axes(part):
            return d
    return None


def shards(spec: P, mesh_shape: MeshShape) -> int:
    """Into how many pieces the spec cuts an array (its copies hold one piece each)."""
    return math.prod(mesh_shape[a] for a in mesh_axes_of(spec))


def local_elements(shapes: Any, specs: Any, mesh_shape: MeshShape) -> int:
    """Scalars one device holds of ``shapes`` laid out as ``specs``."""
    leaves = zip(jax.tree.leaves(shapes), jax.tree.leaves(specs, is_leaf=is_spec))
    return sum(math.prod(x.shape) // shards(s, mesh_shape) for x, s in leaves)


def as_json(specs: Any) -> Any:
    """Specs as plain lists (None for an unsplit dimension, trailing ones dropped), for snapshots and
    comparisons: P("x", None) and P("x") place an array alike."""
    def plain(spec: P) -> list:
        parts = [list(p) if isinstance(p, tuple) else p for p in spec]
        while parts and parts[-1] is None:
            parts.pop()
        return parts
    return jax.tree.map(plain, specs, is_leaf=is_spec)


def fsdp_rules(axis: str | tuple[str, ...]) -> Rules:
    """Every weight split once over ``axis``: the embeddings along V, MLP weights along F, the rest
    along D, else the first of the head axes that the axis size divides (FSDP, section 5.1.2)."""
    return tuple((logical, axis) for logical in
                 ("vocab", "d_ff", "shared_ff", "d_model", "q_heads", "kv_heads", "head_dim", "experts"))


def tensor_rules(axis: str) -> Rules:
    """Megatron tensor parallelism (section 5.1.3): attention heads and the MLP's F over ``axis``."""
    return (("q_heads", axis), ("kv_heads", axis), ("d_ff", axis))
