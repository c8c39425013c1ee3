"""Reading collectives back out of the HLO that XLA compiles.

Book section 3 predicts which collectives a sharded computation needs; section 10 (profiling) reads
the compiled program to see which ones XLA actually inserted. ``hlo_collectives`` gives each
collective's kind and the mesh axes it runs over; ``collective_ops`` adds the bytes of its result,
so a cost model's byte counts can be held against the real program.
"""

from __future__ import annotations

import math
import re
from itertools import permutations
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from scalelib.collectives import KINDS
from scalelib.hlo_text import DTYPE_BYTES as DTYPE_BYTES  # bytes per element of each type HLO prints
from scalelib.hlo_text import array_bytes, strip_index_comments

_HLO_NAMES = "|".join(k.replace("_", "-") for k in KINDS)  # all-gather|...|collective-permute
COLLECTIVE_OP = re.compile(rf"\b({_HLO_NAMES})(?:-start)?\(")  # one collective instruction of HLO text
_GROUPS = re.compile(r"replica_groups=(\{\{[\d,{} ]*\}\}|\[[\d,]+\]<=\[[\d,]+\](?:T\([\d,]+\))?"
                     r"|mesh\[[^\]]*\](?:,\s*device_ids=\(\[[\d,]+\](?:T\([\d,]+\))?\))?\s*\{[^}]*\})")


def _parse_groups(text: str, n_devices: int) -> frozenset | None:
    """Replica groups of one HLO collective as a set of device-position sets (None if unknown)."""
    if text.startswith("{{"):
        return frozenset(frozenset(int(x) for x in g.split(",") if x.strip())
                         for g in re.findall(r"\{([\d, ]*)\}", text[1:-1]))
    if text.startswith("["):  # iota form: [groups,size]<=[dims]T(perm)
        m = re.match(r"\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", text)
        if m is None:
            return None
        shape, dims = [int(x) for x in m.group(1).split(",")], [int(x) for x in m.group(2).split(",")]
        iota: np.ndarray = np.arange(math.prod(dims)).reshape(dims)
        if m.group(3):
            iota = iota.transpose([int(x) for x in m.group(3).split(",")])
        return frozenset(frozenset(int(x) for x in row) for row in iota.reshape(shape[0], -1))
    # mesh form: mesh['a'=2,'b'=4] {'b'}, optionally with device_ids=([dims]T(perm)) renumbering
    m = re.match(r"mesh\[([^\]]*)\](?:,\s*device_ids=\(\[([\d,]+)\](?:T\(([\d,]+)\))?\))?\s*\{([^}]*)\}", text)
    if m is None:
        return None
    sizes = {k: int(v) for k, v in re.findall(r"'(\w+)'=(\d+)", m.group(1))}
    if math.prod(sizes.values()) != n_devices:
        return None
    ids: np.ndarray = np.arange(n_devices)
    if m.group(2):
        ids = ids.reshape([int(x) for x in m.group(2).split(",")])
        if m.group(3):
            ids = ids.transpose([int(x) for x in m.group(3).split(",")])
    ids = ids.reshape(-1)
    groups = _axis_groups(sizes, re.findall(r"'(\w+)'", m.group(4)))
    return frozenset(frozenset(int(ids[d]) for d in g) for g in groups)


def _axis_groups(shape: Mapping[str, int], axes: Sequence[str]) -> frozenset:
    """Device positions that talk to each other in a collective over ``axes`` of a mesh."""
    names = list(shape)
    ids = np.arange(math.prod(shape.values())).reshape(list(shape.values()))
    moved = np.moveaxis(ids, [names.index(a) for a in axes], range(-len(axes), 0))
    return frozenset(frozenset(int(x) for x in row) for row in moved.reshape(-1, math.prod(shape[a] for a in axes)))


def hlo_collectives(hlo_text: str, mesh_shape: Mapping[str, int]) -> tuple[tuple[str, tuple[str, ...] | None], ...]:
    """(kind, mesh axes) of every collective in compiled HLO text, in program order.

    Kinds use the planner's names ("all_gather", ..., "collective_permute"); axes are found by
    matching the replica groups against each set of mesh axes (None for collective-permute,
    whose pairs are not groups, or for groups that match no set of axes).
    """
    shape = dict(mesh_shape)
    n = math.prod(shape.values())
    by_groups: dict[frozenset, tuple[str, ...]] = {}
    for r in range(len(shape), 0, -1):
        for axes in permutations(shape, r):
            by_groups.setdefault(_axis_groups(shape, axes), tuple(a for a in shape if a in axes))
    out = []
    for line in hlo_text.splitlines():
        op = COLLECTIVE_OP.search(line)
        if not op or "-done(" in line:
            continue
        g = _GROUPS.search(line)
        groups = _parse_groups(g.group(1), n) if g else None
        out.append((op.group(1).replace("-", "_"), by_groups.get(groups) if groups else None))
    return tuple(out)


_RESULT = re.compile(rf"=\s*(\(?[^=]*?\)?)\s+(?:{_HLO_NAMES})(?:-start)?\(")


@dataclass(frozen=True)
class CollectiveOp:
    """One collective of a compiled program."""

    kind: str  # "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "collective_permute"
    axes: tuple[str, ...] | None  # mesh axes it runs over (None: a permute, or groups matching no axes)
    result_bytes: int  # bytes of its result on one device (all outputs of a tuple-shaped op)


def _result_bytes(line: str) -> int:
    m = _RESULT.search(line)
    if not m:
        return 0
    total = array_bytes(m.group(1))
    # async "-start" ops return (operands, results[, scratch]); count only the results half
    return total // 2 if "-start(" in line and m.group(1).startswith("(") else total


def collective_ops(hlo_text: str, mesh_shape: Mapping[str, int]) -> tuple[CollectiveOp, ...]:
    """Every collective in compiled HLO text, in program order, with its axes and result bytes."""
    hlo_text = strip_index_comments(hlo_text)
    kinds = hlo_collectives(hlo_text, mesh_shape)
    lines = [ln for ln in hlo_text.splitlines() if COLLECTIVE_OP.search(ln) and "-done(" not in ln]
    return tuple(CollectiveOp(kind, axes, _result_bytes(ln)) for (kind, axes), ln in zip(kinds, lines))


def xla_flops(fn: Callable, *args: Any) -> float:
    """The FLOPs XLA counts (``cost_analysis``) for ``jax.jit(fn)`` compiled for ``args`` (arrays or shapes)."""
    import jax

    analysis = jax.jit(fn).lower(*args).compile().cost_analysis()
    if not analysis or "flops" not in analysis:
        raise ValueError("XLA gave no FLOP count for this program (its backend has no cost analysis)")
    return float(analysis["flops"])


def compiled_hlo(jitted: Any, *args: Any) -> str:
    """HLO text of ``jitted`` (a jax.jit function) compiled for ``args`` (arrays or ShapeDtypeStructs)."""
    return jitted.lower(*args).compile().as_text()
