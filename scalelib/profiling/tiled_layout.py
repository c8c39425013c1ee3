"""Tiled memory layouts (book section 9.2.2): padding, element offsets, and HLO layout strings.

An HLO shape such as ``bf16[32,32,4096]{2,1,0:T(8,128)(2,1)S(1)}`` says in which order the dims sit
in memory (minor first), how the minor dims are cut into tiles, and which memory holds the array
(``S(1)``: VMEM; none or ``S(0)``: HBM). Dims are padded up to whole tiles, so a small or oddly shaped
array takes more memory than its elements.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence, cast

import numpy as np

from scalelib import hlo
from scalelib.validate import positive_int


MEMORY_SPACES = {0: "HBM", 1: "VMEM"}  # other S(n) numbers are further on-chip memories

# ------------------------------------------------------------------ tiled memory layouts


def _positive_ints(values: Sequence[int], what: str) -> tuple[int, ...]:
    if not len(values):
        raise ValueError(f"{what} must be a non-empty list of positive ints, got {list(values)!r}")
    return tuple(positive_int(f"{what} {list(values)!r}: entry {i}", v) for i, v in enumerate(values))


def padded_shape(shape: Sequence[int], tile: Sequence[int]) -> tuple[int, ...]:
    """``shape`` (major to minor) with its last len(tile) dims rounded up to whole tiles."""
    shape, tile = tuple(int(s) for s in shape), _positive_ints(tile, "tile")
    if any(s < 0 for s in shape):
        raise ValueError(f"shape must hold sizes >= 0, got {shape!r}")
    if len(tile) > len(shape):  # a tile of higher rank sees leading dims of size 1
        shape = (1,) * (len(tile) - len(shape)) + shape
    head, tail = shape[:len(shape) - len(tile)], shape[len(shape) - len(tile):]
    return head + tuple(-(-s // t) * t for s, t in zip(tail, tile))


def _padded_elements(shape: Sequence[int], tiles: Sequence[Sequence[int]]) -> int:
    """Elements stored for ``shape`` under nested tiles (each later tile cuts the tile before it)."""
    if not tiles:
        return math.prod(shape)
    outer = padded_shape(shape, tiles[0])
    per_tile = _padded_elements(tuple(tiles[0]), tiles[1:])
    return math.prod(outer) // math.prod(tiles[0]) * per_tile


def padding_ratio(shape: Sequence[int], tile: Sequence[int] | Sequence[Sequence[int]]) -> float:
    """Stored over real elements of a row-major array tiled by ``tile`` (or nested tiles)."""
    nested = bool(tile) and isinstance(tile[0], (tuple, list))
    tiles = [tuple(t) for t in cast(Sequence[Sequence[int]], tile)] if nested else [tuple(cast(Sequence[int], tile))]
    real = math.prod(shape)
    if real == 0:
        raise ValueError(f"shape {tuple(shape)} has no elements, so it has no padding ratio")
    return _padded_elements(tuple(shape), tiles) / real


def tiled_offsets(shape: Sequence[int], tiles: Sequence[Sequence[int]]) -> np.ndarray:
    """Memory slot of each element of a row-major array stored in (nested) tiles.

    Tiles are laid out one after another in row-major order of the tile grid; inside a tile the
    next tile level applies in the same way, and the innermost level is row-major. Padding slots
    are skipped in the numbering of the grid but still take room.
    """
    shape = tuple(int(s) for s in shape)
    tiles = [_positive_ints(t, "tile") for t in tiles]
    idx = np.indices(shape).reshape(len(shape), -1).T  # [elements, ndim]

    def offset(ix: np.ndarray, dims: tuple[int, ...], level: int) -> np.ndarray:
        if level == len(tiles):
            return np.ravel_multi_index(ix.T, dims)
        t = tiles[level]
        if len(t) > len(dims):
            raise ValueError(f"tile {t} has more dims than the shape {dims} it cuts")
        t = (1,) * (len(dims) - len(t)) + tuple(t)
        grid = tuple(-(-d // s) for d, s in zip(dims, t))
        stride = _padded_elements(t, tiles[level + 1:])
        outer = np.ravel_multi_index((ix // t).T, grid)
        return outer * stride + offset(ix % t, t, level + 1)

    return offset(idx, shape, 0).reshape(shape)


_LAYOUT = re.compile(r"^\s*(\w+)\[([\d,]*)\](?:\{([\d,]*)(?::([^}]*))?\})?\s*$")


@dataclass(frozen=True)
class Layout:
    """One HLO array type: dtype, logical shape, memory order, tiles and memory space."""

    dtype: str  # HLO name: "f32", "bf16", ...
    shape: tuple[int, ...]
    minor_to_major: tuple[int, ...]
    tiles: tuple[tuple[int, ...], ...] = ()
    memory_space: int = 0

    @property
    def physical_shape(self) -> tuple[int, ...]:
        """Dims in memory order, major first."""
        return tuple(self.shape[d] for d in reversed(self.minor_to_major))

    @property
    def padded_shape(self) -> tuple[int, ...]:
        """Physical shape rounded up to whole outer tiles."""
        return padded_shape(self.physical_shape, self.tiles[0]) if self.tiles else self.physical_shape

    @property
    def padding_ratio(self) -> float:
        return _padded_elements(self.physical_shape, self.tiles) / math.prod(self.shape)

    @property
    def bytes(self) -> int:
        return math.prod(self.shape) * hlo.DTYPE_BYTES[self.dtype]

    @property
    def padded_bytes(self) -> int:
        return _padded_elements(self.physical_shape, self.tiles) * hlo.DTYPE_BYTES[self.dtype]

    @property
    def memory(self) -> str:
        return MEMORY_SPACES.get(self.memory_space, f"S({self.memory_space})")


def parse_layout(text: str) -> Layout:
    """Read an HLO type like ``f32[3,5]{1,0:T(2,2)}`` or ``bf16[8,128]{1,0:T(8,128)(2,1)S(1)}``."""
    m = _LAYOUT.match(text)
    if not m or m.group(1) not in hlo.DTYPE_BYTES:
        raise ValueError(f"cannot read HLO array type {text!r}; expected e.g. 'f32[3,5]{{1,0:T(2,2)}}'")
    shape = tuple(int(x) for x in m.group(2).split(",") if x)
    order = tuple(int(x) for x in m.group(3).split(",") if x) if m.group(3) is not None else tuple(
        reversed(range(len(shape))))
    if sorted(order) != list(range(len(shape))):
        raise ValueError(f"{text!r}: the dim order {order} is not a permutation of the {len(shape)} dims")
    rest = m.group(4) or ""  # e.g. "T(8,128)(2,1)S(1)"
    tiled = re.search(r"T((?:\([\d,]+\))+)", rest)
    found = re.findall(r"\(([\d,]+)\)", tiled.group(1)) if tiled else []
    tiles = tuple(tuple(int(x) for x in t.split(",")) for t in found)
    space = re.search(r"S\((\d+)\)", rest)
    return Layout(m.group(1), shape, order, tiles, int(space.group(1)) if space else 0)

