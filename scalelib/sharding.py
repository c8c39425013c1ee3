"""The book's sharding notation, A[I_X, J_Y]{U_Z}, as a frozen value.

Book section 3.1 (Partitioning Notation). A sharding names each dimension of an array and the
mesh axes it is split over: ``A[I_XY, J]`` splits I over the flattened X-Y grid (X major) and
keeps J whole, so J's blocks are copied on every device. ``{U_X}`` marks a result that still
holds partial sums over X (section 3.2, Case 3) and is only complete after a reduction.

A ``Sharding`` converts to a ``jax.sharding.PartitionSpec`` (``.spec``), gives per-device
shapes and bytes for a mesh (a mapping from axis name to size, or a ``jax.sharding.Mesh``), says
which block every device holds (in the same device order as ``NamedSharding``), and draws it.
Device numbers are positions in the mesh, row-major over the mesh axes in the mesh's order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

import numpy as np
from jax.sharding import PartitionSpec

from scalelib.validate import positive_int

MeshShape = Mapping[str, int]

_WHOLE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9']*)?\s*\[(.*)\]\s*(\{(.*)\})?\s*$")
_DIM = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:_(\{[^}]*\}|[A-Za-z]+))?$")


def _axis_list(text: str, where: str) -> tuple[str, ...]:
    """'XY' -> ('X', 'Y'); '{data,model}' -> ('data', 'model')."""
    if text.startswith("{"):
        names = tuple(n.strip() for n in text[1:-1].split(",") if n.strip())
    else:
        names = tuple(text)
    if not names:
        raise ValueError(f"{where}: empty list of mesh axes; write e.g. I_X or I_{{X,Y}}")
    return names


def _split_top(body: str) -> list[str]:
    """Split on commas that are not inside braces."""
    parts, depth, cur = [], 0, ""
    for ch in body:
        depth += (ch == "{") - (ch == "}")
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()] if cur.strip() or parts else []


MeshLike = Any  # a Mapping of axis names to sizes, or a jax Mesh


def _mesh_shape(mesh: MeshLike) -> dict[str, int]:
    """A mesh given as a dict or a jax Mesh, as an ordered dict of axis sizes."""
    shape = dict(mesh.shape) if hasattr(mesh, "axis_names") else dict(mesh)
    return {name: positive_int(f"the size of mesh axis {name!r}", size) for name, size in shape.items()}


@dataclass(frozen=True)
class Sharding:
    """One array's sharding: dimension names, mesh axes per dimension, unreduced axes."""

    dims: tuple[str, ...]
    axes: tuple[tuple[str, ...], ...]  # mesh axes of each dim, major first
    unreduced: tuple[str, ...] = ()
    name: str = "A"

    def __post_init__(self) -> None:
        if len(self.dims) != len(self.axes):
            raise ValueError(f"{len(self.dims)} dims but {len(self.axes)} axis lists; give one per dim")
        if len(set(self.dims)) != len(self.dims):
            raise ValueError(f"dimension names {self.dims} repeat; name every dimension differently")
        seen: dict[str, str] = {}
        for dim, axes in zip(self.dims, self.axes):
            for axis in axes:
                if axis in seen:
                    raise ValueError(
                        f"{self}: mesh axis {axis!r} shards both {seen[axis]} and {dim}; an axis can "
                        "split at most one dimension (gather one of them first)")
                seen[axis] = dim
        for axis in self.unreduced:
            if axis in seen:
                raise ValueError(f"{self}: axis {axis!r} is both sharding {seen[axis]} and unreduced; "
                                 "reduce over it (AllReduce / ReduceScatter) before sharding over it")
        if len(set(self.unreduced)) != len(self.unreduced):
            raise ValueError(f"unreduced axes {self.unreduced} repeat")

    # ---------------------------------------------------------------- text <-> value
    @classmethod
    def parse(cls, text: str) -> Sharding:
        """Read the book's notation: ``"A[I_X, J_Y]"``, ``"A[I_XY, J]"``, ``"C[I, K]{U_X}"``.

        Multi-letter mesh axis names go in braces: ``"A[B_{data}, D_{model}]"``.
        """
        m = _WHOLE.match(text)
        if not m:
            raise ValueError(f"cannot read sharding {text!r}; write it like 'A[I_X, J_Y]' or 'C[I, K]{{U_X}}'")
        name, body, _, unreduced_text = m.groups()
        dims, axes = [], []
        for part in _split_top(body):
            dm = _DIM.match(part)
            if not dm:
                raise ValueError(f"cannot read dimension {part!r} in {text!r}; write e.g. I, I_X or I_XY")
            dims.append(dm.group(1))
            axes.append(_axis_list(dm.group(2), f"{text!r}") if dm.group(2) else ())
        unreduced: list[str] = []
        if unreduced_text is not None:
            for part in (p.strip() for p in unreduced_text.split(",") if p.strip()):
                if not part.startswith("U_"):
                    raise ValueError(f"unreduced part {part!r} of {text!r} must look like U_X")
                unreduced.extend(_axis_list(part[2:], f"{text!r}"))
        return cls(tuple(dims), tuple(axes), tuple(unreduced), name or "A")

    def __str__(self) -> str:
        def axes_text(axes: Sequence[str]) -> str:
            return "".join(axes) if all(len(a) == 1 for a in axes) else "{" + ",".join(axes) + "}"

        body = ", ".join(d + (f"_{axes_text(a)}" if a else "") for d, a in zip(self.dims, self.axes))
        tail = f"{{U_{axes_text(self.unreduced)}}}" if self.unreduced else ""
        return f"{self.name}[{body}]{tail}"

    @property
    def spec(self) -> PartitionSpec:
        """The JAX PartitionSpec (unreduced axes included where present)."""
        entries = [None if not a else a[0] if len(a) == 1 else tuple(a) for a in self.axes]
        if self.unreduced:
            return PartitionSpec(*entries, unreduced=set(self.unreduced))
        return PartitionSpec(*entries)

    @classmethod
    def from_spec(cls, spec: PartitionSpec, dims: Sequence[str], name: str = "A") -> Sharding:
        """The sharding a PartitionSpec describes, with ``dims`` naming the array's dimensions."""
        entries = list(spec) + [None] * (len(dims) - len(spec))
        if len(entries) != len(dims):
            raise ValueError(f"spec {spec} has {len(spec)} entries but only {len(dims)} dims were named")
        axes = tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries)
        return cls(tuple(dims), axes, tuple(sorted(getattr(spec, "unreduced", ()) or ())), name)

    # ---------------------------------------------------------------- edits
    def axes_of(self, dim: str) -> tuple[str, ...]:
        if dim not in self.dims:
            raise KeyError(f"{self} has no dimension {dim!r}; its dims are {self.dims}")
        return self.axes[self.dims.index(dim)]

    def with_axes(self, dim: str, axes: Sequence[str]) -> Sharding:
        """The same sharding with ``dim`` split over ``axes`` instead."""
        self.axes_of(dim)
        new = tuple(tuple(axes) if d == dim else a for d, a in zip(self.dims, self.axes))
        return replace(self, axes=new)

    def with_unreduced(self, axes: Sequence[str]) -> Sharding:
        return replace(self, unreduced=tuple(axes))

    def renamed(self, name: str) -> Sharding:
        return replace(self, name=name)

    @property
    def used_axes(self) -> tuple[str, ...]:
        return tuple(a for axes in self.axes for a in axes)

    # ---------------------------------------------------------------- sizes
    def check_mesh(self, mesh: MeshLike) -> dict[str, int]:
        shape = _mesh_shape(mesh)
        for axis in self.used_axes + self.unreduced:
            if axis not in shape:
                raise ValueError(f"{self} uses mesh axis {axis!r} but the mesh only has axes "
                                 f"{list(shape)}; add it to the mesh or drop it from the sharding")
        return shape

    def shards(self, mesh: MeshLike) -> tuple[int, ...]:
        """Number of blocks each dimension is cut into."""
        shape = self.check_mesh(mesh)
        return tuple(math.prod(shape[a] for a in axes) for axes in self.axes)

    def local_shape(self, global_shape: Sequence[int], mesh: MeshLike) -> tuple[int, ...]:
        """The block one device holds: each dim divided by the sizes of its mesh axes."""
        if len(global_shape) != len(self.dims):
            raise ValueError(f"{self} has {len(self.dims)} dims but the global shape {tuple(global_shape)} "
                             f"has {len(global_shape)}")
        shape = self.check_mesh(mesh)
        out = []
        for dim, axes, size, n in zip(self.dims, self.axes, global_shape, self.shards(shape)):
            if size % n:
                where = " x ".join(f"{a}={shape[a]}" for a in axes)
                raise ValueError(
                    f"mesh axis {'/'.join(repr(a) for a in axes)} has {n} devices ({where}) but dimension "
                    f"{dim} has size {size}, which {n} does not divide; pick a mesh size that divides {size}")
            out.append(size // n)
        return tuple(out)

    def local_bytes(self, global_shape: Sequence[int], mesh: MeshLike, dtype_bytes: float) -> float:
        """Bytes held by one device."""
        return float(math.prod(self.local_shape(global_shape, mesh)) * dtype_bytes)

    def replication(self, mesh: MeshLike) -> int:
        """How many devices hold each block: the product of the mesh axes this sharding leaves out."""
        shape = self.check_mesh(mesh)
        return math.prod(n for a, n in shape.items() if a not in self.used_axes)

    def total_bytes(self, global_shape: Sequence[int], mesh: MeshLike, dtype_bytes: float) -> float:
        """Bytes summed over every device of the mesh, copies included."""
        shape = self.check_mesh(mesh)
        return self.local_bytes(global_shape, shape, dtype_bytes) * math.prod(shape.values())

    # ---------------------------------------------------------------- who holds what
    def block_index(self, coords: Mapping[str, int], mesh: MeshLike) -> tuple[int, ...]:
        """Block (along each dim) held by the device at mesh ``coords``; mixed radix, first axis major."""
        shape = self.check_mesh(mesh)
        out = []
        for axes in self.axes:
            idx = 0
            for a in axes:
                idx = idx * shape[a] + coords[a]
            out.append(idx)
        return tuple(out)

    def device_blocks(self, mesh: MeshLike) -> dict[int, tuple[int, ...]]:
        """Device number (row-major mesh position) -> block index along each dim."""
        shape = self.check_mesh(mesh)
        names = list(shape)
        return {pos: self.block_index(dict(zip(names, coords)), shape)
                for pos, coords in enumerate(np.ndindex(*shape.values()))}

    def device_slices(self, global_shape: Sequence[int], mesh: MeshLike) -> dict[int, tuple[slice, ...]]:
        """Device number -> the slices of the global array it holds (like NamedSharding's map)."""
        local = self.local_shape(global_shape, mesh)
        return {d: tuple(slice(b * n, (b + 1) * n) for b, n in zip(blk, local))
                for d, blk in self.device_blocks(mesh).items()}

    def holders(self, mesh: MeshLike) -> dict[tuple[int, ...], tuple[int, ...]]:
        """Block index -> the devices holding a copy of it."""
        out: dict[tuple[int, ...], list[int]] = {}
        for dev, blk in self.device_blocks(mesh).items():
            out.setdefault(blk, []).append(dev)
        return {blk: tuple(devs) for blk, devs in sorted(out.items())}


def parse(text: str) -> Sharding:
    """Shorthand for ``Sharding.parse``."""
    return Sharding.parse(text)


def as_sharding(s: Sharding | str) -> Sharding:
    return s if isinstance(s, Sharding) else Sharding.parse(s)


# -------------------------------------------------------------------- pictures
def _grid(s: Sharding, global_shape: Sequence[int], mesh: MeshLike) -> tuple[Any, Any, Any]:
    """(row blocks, column blocks, holders) for a 1-D or 2-D array (1-D drawn as one row)."""
    if len(s.dims) not in (1, 2):
        raise ValueError(f"{s} has {len(s.dims)} dims; only 1-D and 2-D arrays can be drawn "
                         "(use device_slices for the others)")
    s.local_shape(global_shape, mesh)  # divisibility check with its message
    shards = s.shards(mesh)
    rows, cols = (1, shards[0]) if len(shards) == 1 else shards
    held = {((0,) + b if len(b) == 1 else b): d for b, d in s.holders(mesh).items()}
    return rows, cols, held


def render_text(s: Sharding | str, global_shape: Sequence[int], mesh: MeshLike,
                dtype_bytes: float | None = None) -> str:
    """A terminal table: one cell per block, listing the devices (mesh positions) that hold it."""
    s = as_sharding(s)
    shape = s.check_mesh(mesh)
    rows, cols, held = _grid(s, global_shape, shape)
    local = s.local_shape(global_shape, shape)
    lshape = (1,) + local if len(local) == 1 else local
    head = (f"{s} on mesh {dict(shape)}: global {tuple(global_shape)}, per device {local}, "
            f"{s.replication(shape)} cop{'y' if s.replication(shape) == 1 else 'ies'} of each block")
    if dtype_bytes is not None:
        head += f", {s.local_bytes(global_shape, shape, dtype_bytes):.0f} bytes per device"
    col_names = [f"{s.dims[-1]} {c * lshape[1]}:{(c + 1) * lshape[1]}" for c in range(cols)]
    row_names = ([f"{s.dims[0]} {r * lshape[0]}:{(r + 1) * lshape[0]}" for r in range(rows)]
                 if len(s.dims) == 2 else [""])
    cells = [["d" + ",".join(map(str, held[(r, c)])) for c in range(cols)] for r in range(rows)]
    width = max(len(x) for x in col_names + [c for row in cells for c in row]) + 2
    left = max(len(x) for x in row_names) + 2
    lines = [head, " " * left + "".join(n.ljust(width) for n in col_names)]
    for name, row in zip(row_names, cells):
        lines.append(name.ljust(left) + "".join(c.ljust(width) for c in row))
    return "\n".join(line.rstrip() for line in lines)


def plot(s: Sharding | str, global_shape: Sequence[int], mesh: MeshLike, ax: Any = None) -> tuple[Any, Any]:
    """Draw the array as blocks coloured by the first device holding each, labelled with all holders.

    Returns ``(fig, ax)``; nothing is shown (call ``plt.show()`` or let the notebook display it).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    s = as_sharding(s)
    shape = s.check_mesh(mesh)
    rows, cols, held = _grid(s, global_shape, shape)
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.2 * cols + 1.5, 0.9 * rows + 1.2))
    else:
        fig = ax.figure
    cmap = plt.get_cmap("tab20")
    for (r, c), devs in held.items():
        ax.add_patch(Rectangle((c, rows - 1 - r), 1, 1, facecolor=cmap(devs[0] % 20), edgecolor="black"))
        ax.text(c + 0.5, rows - 0.5 - r, "\n".join(f"d{d}" for d in devs), ha="center", va="center", fontsize=8)
    ax.set_xlim(0, cols)
    ax.set_ylim(0, rows)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel(s.dims[-1])
    if len(s.dims) == 2:
        ax.set_ylabel(s.dims[0])
    ax.set_title(f"{s}  mesh {dict(shape)}", fontsize=9)
    ax.set_aspect("auto")
    return fig, ax
